"""Kafka's partitioning and topic readiness against the real stack.

Every producer of set topics partitions keyed messages the way Kafka's Java
clients do (murmur2 of the serialized key, WIRE.md "Keys and partitioning"):
checked against Kafka's own code (tests/java/KafkaPartitions.java runs the
kafka-clients jar), never against a Python reimplementation. The bootstrap's
``--to-kafka`` output is checked in test_bootstrap.py.
"""

import os
import random
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from pgshovel2 import names
from pgshovel2.config import TopicsConfig
from pgshovel2.errors import UnavailableError
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.sinks.topics import wait_until_served
from tests.helpers import caught_up, kafka_partitions, pgshovel, read_partitioned, write_config

# Kafka's documented murmur2 vectors (clients/src/test/.../common/utils/UtilsTest.java, testMurmur2).
KAFKA_VECTORS = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                 b"a-little-bit-longer-string": -1486304829,
                 b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
PARTITIONS = 6


def assert_kafka_partitioned(messages: list[tuple[int, bytes | None, bytes | None]], partitions: int) -> None:
    """Every keyed message is in the partition Kafka's Java producer computes for its key."""
    keyed = [(p, k) for p, k, _ in messages if k is not None]
    expected = kafka_partitions([k for _, k in keyed], partitions)
    wrong = [(k, p, want) for (p, k), (_, want) in zip(keyed, expected, strict=True) if p != want]
    assert not wrong, f"{len(wrong)} of {len(keyed)} keys in another partition than Kafka's; first " \
                      f"(key, partition, Kafka's): {wrong[0]}"


def test_oracle_is_kafkas_murmur2():
    hashes = kafka_partitions(list(KAFKA_VECTORS), PARTITIONS)
    assert [h for h, _ in hashes] == list(KAFKA_VECTORS.values())
    assert [p for _, p in hashes] == [(h & 0x7FFFFFFF) % PARTITIONS for h in KAFKA_VECTORS.values()]


@pytest.mark.parametrize("transactional", [True, False])
def test_sink_partitions_keys_as_kafka_does(stack, transactional, producer_kind):
    rnd = random.Random(14)
    keys = [*KAFKA_VECTORS, b"", *(rnd.randbytes(rnd.randrange(1, 80)) for _ in range(400))]
    topic = f"murmur-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(stack.bootstrap, f"test-{topic}" if transactional else None)
    try:
        assert sink.ensure_topics({topic: "delete"}, TopicsConfig(partitions=PARTITIONS)) == [topic]
        sink.start()
        for key in keys:
            sink.produce(topic, key, b"v", [])
        sink.produce(topic, None, b"null key", [])  # any partition (murmur2_random: random)
        sink.commit()
    finally:
        sink.close()
    got = read_partitioned(stack.bootstrap, topic)
    assert sorted(k for _, k, _ in got if k is not None) == sorted(keys)
    assert [v for _, k, v in got if k is None] == [b"null key"]
    assert_kafka_partitioned(got, PARTITIONS)


def test_sink_refuses_another_partitioner():
    with pytest.raises(ValueError, match="partitioner='consistent_random'.*murmur2"):
        KafkaSink("127.0.0.1:1", None, {"partitioner": "consistent_random"})


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_relay_partitions_keys_as_kafka_does(stack, cluster, db, schema, tmp_path, relay_factory, encoding):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int, "Näme.x" text, v text, PRIMARY KEY (id, "Näme.x"))')
        cur.execute(f"INSERT INTO \"{schema}\".t SELECT g, 'n' || g, 'snap' FROM generate_series(1, 200) g")
    prefix = f"part{encoding}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding=encoding,
                       topic_prefix=prefix, topics={"partitions": PARTITIONS})
    pgshovel(stack, cluster, "set", "create", "part", str(cfg))
    relay_factory("part").wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".t SELECT g, 'é' || g, 'new' FROM generate_series(201, 500) g")
        cur.execute(f"UPDATE \"{schema}\".t SET v = 'upd' WHERE id % 3 = 0")
        cur.execute(f'DELETE FROM "{schema}".t WHERE id % 7 = 0')
        cur.execute(f"UPDATE \"{schema}\".t SET id = id + 1000 WHERE id % 11 = 0")  # tombstone + create
    caught_up(stack, cluster, "part")
    got = read_partitioned(stack.bootstrap, names.table_topic(prefix, schema, "t"))
    assert len({k for _, k, _ in got}) == 500 + 500 // 11 - 500 // 77
    assert len({p for p, _, _ in got}) == PARTITIONS
    assert_kafka_partitioned(got, PARTITIONS)


FRESH_STARTS = int(os.environ.get("PGSHOVEL2_TEST_FRESH_STARTS", "6"))


def test_fresh_relays_produce_only_once_topics_have_leaders(stack, cluster, db, schema, tmp_path, relay_factory):
    """A relay creating its topics waits for their partition leaders: no NOT_LEADER on a first start."""
    with db.cursor() as cur:
        for t in ("a", "b", "c"):
            cur.execute(f'CREATE TABLE "{schema}".{t} (id int PRIMARY KEY, v text)')
            cur.execute(f"INSERT INTO \"{schema}\".{t} SELECT g, 'x' FROM generate_series(1, 50) g")
    relays = []
    for i in range(FRESH_STARTS):
        name = f"fresh{i}"
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": t} for t in ("a", "b", "c")],
                           topic_prefix=f"{name}{cluster}", topics={"partitions": 12})
        pgshovel(stack, cluster, "set", "create", name, str(cfg))
        relay = relay_factory(name)
        relay.wait_for("snapshot done")
        relays.append(relay)
    with db.cursor() as cur:
        cur.execute(f"UPDATE \"{schema}\".a SET v = 'y'")
    for i, relay in enumerate(relays):
        caught_up(stack, cluster, f"fresh{i}")
        assert relay.stop() == 0
        log = relay.log()
        assert "created topic" in log
        bad = [line for line in log.splitlines() if "NOT_LEADER" in line or "Not leader" in line]
        assert not bad, f"relay of set fresh{i}:\n" + "\n".join(bad)


def test_topic_never_served_is_named(stack):
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    with pytest.raises(UnavailableError, match=r"topic 'never-created-[0-9a-f]+' was created .* not ready for use "
                                               r"after 2s: not in the metadata yet"):
        wait_until_served(admin, {f"never-created-{uuid.uuid4().hex[:8]}": 3}, stack.bootstrap, timeout=2)
