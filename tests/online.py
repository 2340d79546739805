"""Helpers of the online snapshot tests: writers that move keys across chunks, the topic read from
a point on, and the check that the state rebuilt from that suffix alone equals the table."""

import io
import json
import random
import threading
import time
import uuid
from collections import Counter

import fastavro
import psycopg2
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import backends
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import RelayError
from pgshovel2.ops.verify import compare, rebuild
from pgshovel2.relay.emit import routes as setup
from pgshovel2.sinks.registry import SchemaRegistry
from pgshovel2.wire import OP
from tests.helpers import Decoder


def writer(dsn: str, table: str, stop: threading.Event, seed: int, keys: int) -> int:
    """Updates, deletes, re-inserts and key moves (to anywhere in 1..2*keys: across chunks) of
    random keys until stop; returns the transactions done."""
    rnd = random.Random(seed)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    done = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            k = rnd.randrange(1, keys)
            op = rnd.random()
            try:
                if op < 0.4:
                    cur.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (k,))
                elif op < 0.6:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
                elif op < 0.8:
                    cur.execute(f"INSERT INTO {table} VALUES (%s, -1, 'again') ON CONFLICT (id) DO UPDATE "
                                "SET n = excluded.n - 1", (k,))
                else:
                    cur.execute(f"UPDATE {table} SET id = %s, s = 'moved' WHERE id = %s",
                                (rnd.randrange(1, 2 * keys), k))
            except psycopg2.errors.UniqueViolation:
                continue
            done += 1
            time.sleep(0.001)
    conn.close()
    return done


def start_writers(dsn: str, table: str, keys: int, count: int = 2) -> tuple[threading.Event, list]:
    """count writer threads on table; returns (stop event, threads)."""
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(dsn, table, stop, i, keys)) for i in range(count)]
    for t in threads:
        t.start()
    return stop, threads


def stop_writers(stop: threading.Event, threads: list) -> None:
    stop.set()
    for t in threads:
        t.join()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: end offset} of topic now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
    finally:
        consumer.close()


def read_from(bootstrap: str, topic: str, start: dict[int, int]) -> list[tuple]:
    """[(key, value, headers)] of the committed messages of topic from start ({partition: offset}) on,
    partition after partition (a key lives in one partition)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        out: dict[int, list] = {p: [] for p in start}
        for msg in _all(consumer, topic, start):
            out[msg.partition()].append((msg.key(), msg.value(), {k: v.decode() for k, v in msg.headers() or []}))
        return [m for p in sorted(out) for m in out[p]]
    finally:
        consumer.close()


def check_suffix(stack, cluster: str, set_name: str, tag: str, start: dict[int, int]) -> tuple[int, Counter]:
    """Rebuild table tag of the set from its topic's messages from start on only (the online
    snapshot's rows and the stream after the request) and compare with the table now; fails with
    the first difference. Returns (op r messages in the suffix, op r count per key)."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    routes, _ = setup.routes(record, SchemaRegistry(stack.registry, max_wait=30))
    route = routes[tag]
    msgs = read_from(stack.bootstrap, route.topic, start)
    state = rebuild(msgs, "", route.envelope)
    with backends.reader(record, RelayError) as snap:
        report = compare(route.table, route.topic, state, route.envelope, snap)
    if not report.ok:
        everything = read_from(stack.bootstrap, route.topic, {p: 0 for p in start})
        bad = report.first_difference.split("'")[1] if "'" in report.first_difference else ""
        trail = [(h.get(OP), h.get("pgshovel.position"), v) for k, v, h in everything if repr(k)[2:-1] == bad]
        raise AssertionError(f"{report.first_difference}; suffix from {start}; the key's messages: {trail}")
    reads = Counter(k for k, _, h in msgs if h.get(OP) == "r")
    return sum(reads.values()), reads


def wait_state(stack, cluster: str, set_name: str, state: str, timeout: float = 180) -> dict:
    """Wait until the set's snapshot request is in state; returns it."""
    deadline = time.monotonic() + timeout
    with ClusterStore(stack.zk, cluster) as store:
        while True:
            data, _ = store.get_snapshot_request(set_name)
            if data is not None and data["state"] == state:
                return data
            assert time.monotonic() < deadline, f"snapshot request never {state}: {data}"
            time.sleep(0.2)


def rebuilt_with_latest_schema(stack, topic: str, start: dict[int, int]) -> dict:
    """{id: row dict} rebuilt from topic's messages from start on, each value read with the schema it
    was written with, resolved to the subject's latest schema (rows written before a DDL too)."""
    registry = SchemaRegistryClient({"url": stack.registry})
    latest = fastavro.parse_schema(json.loads(registry.get_latest_version(f"{topic}-value").schema.schema_str))
    keys = fastavro.parse_schema(json.loads(registry.get_latest_version(f"{topic}-key").schema.schema_str))
    writers: dict[int, dict] = {}
    state = {}
    for key, value, _ in read_from(stack.bootstrap, topic, start):
        k = fastavro.schemaless_reader(io.BytesIO(key[5:]), keys)["id"]
        if value is None:
            state.pop(k, None)
            continue
        sid = int.from_bytes(value[1:5], "big")
        if sid not in writers:
            writers[sid] = fastavro.parse_schema(json.loads(registry.get_schema(sid).schema_str))
        state[k] = fastavro.schemaless_reader(io.BytesIO(value[5:]), writers[sid], latest)
    return state


def snapshot_begin_offsets(stack, transactions: str, topic: str) -> dict[tuple[str, int], int]:
    """Where a consumer starting at table topic's (first) SNAPSHOT_BEGIN starts: {(topic,
    partition): offset} of that record on the transactions topic and, in each partition of topic,
    of the first message at or after its position (the partition's end when none is)."""
    decode = Decoder(stack.registry)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        begin = next((msg.offset(), value["position"]) for msg in _all(consumer, transactions, {0: 0})
                     if (value := decode(msg.value()))["type"] == "SNAPSHOT_BEGIN" and value["table"] == topic)
        out = {(transactions, 0): begin[0]}
        for part, end in end_offsets(stack.bootstrap, topic).items():
            out[(topic, part)] = next((msg.offset() for msg in _all(consumer, topic, {part: 0})
                                       if dict(msg.headers())["pgshovel.position"].decode() >= begin[1]), end)
        return out
    finally:
        consumer.close()


def _all(consumer: Consumer, topic: str, start: dict[int, int]):
    """The committed messages of topic's partitions from start ({partition: offset}) on."""
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    pending = set(start)
    while pending:
        msg = consumer.poll(60)
        assert msg is not None, f"nothing from {topic} in 60s"
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error().str()
            pending.discard(msg.partition())
            continue
        yield msg
