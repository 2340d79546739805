"""The native lane producing straight into the native producer (KafkaSink.produce_natively:
Lane.encode and encode_txns given the producer) against the same lane's message list (what it
returns without the producer, which the unit tests hold against the per-change path): what Kafka
holds afterwards is, topic by topic and in order, the list's messages byte for byte with their
headers. Random rows of every scalar WIRE.md type, JSON and Avro, both envelopes; ChangeRuns of
our plugin's records and TxnRuns of PgQ rows, with the records the lane leaves produced the
Python way in between."""

import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from pgshovel2.codec import avro
from pgshovel2.config import TopicsConfig
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.wire import LOGICAL, change_header_at, position_prefix
from tests.unit.test_lane import TXID, UNIT, UNKEYED, ListSink, decoder, route, trigger_rows, workload
from tests.unit.test_native_codec import TYPES, rows, table
from tests.unit.test_txn_runs import NOW_NS, Batch, ChunkSource, chunked, relay_items, transactions

FORMS = pytest.mark.parametrize("use_avro,envelope", [(True, "row"), (False, "row"), (True, "debezium"),
                                                      (False, "debezium")])


def make_emitter(sink, tbl, use_avro: bool, envelope: str, topics: dict[str, str]) -> Emitter:
    """An emitter of tbl and UNKEYED into topics ({"t", "u", "txns"} -> name), clocks standing still."""
    routes = {tbl.qualified: route(tbl, topics["t"], use_avro, envelope, clock=lambda: NOW_NS),
              UNKEYED.qualified: route(UNKEYED, topics["u"], False, envelope, clock=lambda: NOW_NS)}
    em = Emitter("myset", routes, topics["txns"], avro.AvroWriter(avro.TRANSACTION_SCHEMA, 9) if use_avro else None,
                 sink)
    em.version = 3
    return em


def native_sink(stack, topics: dict[str, str]) -> KafkaSink:
    sink = KafkaSink(stack.bootstrap, f"test-{uuid.uuid4().hex[:8]}")
    sink.ensure_topics({t: "delete" for t in topics.values()}, TopicsConfig(partitions=1))
    sink.start()
    assert type(sink._producer).__module__ == "pgshovel2_native", "the native producer must drive this test"
    return sink


def committed(stack, topics: list[str]) -> list[tuple]:
    """[(topic, key, value, headers as (name, bytes) pairs)] of every committed message, topic by
    topic in offset order."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"test-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    out = []
    try:
        for topic in topics:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            while (msg := consumer.poll(30)) is not None and not msg.error():
                out.append((topic, msg.key(), msg.value(), msg.headers() or []))
            assert msg is not None, f"nothing more from {topic} in 30 s and no end of it"
    finally:
        consumer.close()
    return out


def by_topic(produced: list[tuple], topics: list[str]) -> list[tuple]:
    """ListSink's messages in committed()'s order and form."""
    wire = [(t, k, v, [(n, h.encode() if isinstance(h, str) else h) for n, h in hs]) for t, k, v, hs in produced]
    return [m for topic in topics for m in wire if m[0] == topic]


def relay_runs(em: Emitter, records: list[bytes], tbl) -> int:
    """ChangeRuns of up to 512 records through the lane, a record it leaves through
    Emitter.change; returns the records the lane took."""
    dec, prefix = decoder(tbl), position_prefix(LOGICAL, UNIT)
    em.begin(TXID, prefix, 1_000, ts_us=1_000_007, last_lsn=UNIT - 10_000)
    laned = 0
    for start in range(0, len(records), 512):
        run, i = dec.run(records[start:start + 512]), 0
        while i < len(run.records):
            done = em.change_run(run, i, prefix)
            laned += done
            if not done:
                (change,) = run.expand(run, i, i + 1)
                em.change(change, change_header_at(prefix, change.ordinal))
                done = 1
            i += done
    em.end(TXID, change_header_at(prefix, len(records)), 1_000)
    return laned


@FORMS
def test_change_runs_produced_natively_are_the_lanes_messages(stack, use_avro, envelope):
    tbl = table(True, TYPES)
    records = workload(5, rows(21, 300, True, TYPES), bare=0)  # none the emitter refuses
    topics = {k: f"lane-{k}-{uuid.uuid4().hex[:8]}" for k in ("t", "u", "txns")}
    want = ListSink()
    relay_runs(make_emitter(want, tbl, use_avro, envelope, topics), records, tbl)
    sink = native_sink(stack, topics)
    try:
        assert relay_runs(make_emitter(sink, tbl, use_avro, envelope, topics), records, tbl) > len(records) // 3
        sink.commit()
    finally:
        sink.close()
    names = list(topics.values())
    assert committed(stack, names) == by_topic(want.produced, names)


@FORMS
def test_txn_runs_produced_natively_are_the_lanes_messages(stack, use_avro, envelope):
    tbl = table(True, TYPES)
    chunks = chunked(transactions(trigger_rows(workload(9, rows(23, 300, True, TYPES), bare=0), tbl), 4), 40)
    topics = {k: f"lane-{k}-{uuid.uuid4().hex[:8]}" for k in ("t", "u", "txns")}
    want = ListSink()
    relay_items(make_emitter(want, tbl, use_avro, envelope, topics), want,
                list(ChunkSource(chunks, True)._batch(Batch, None)))
    sink = native_sink(stack, topics)
    try:
        laned = relay_items(make_emitter(sink, tbl, use_avro, envelope, topics), sink,
                            list(ChunkSource(chunks, True)._batch(Batch, None)))
        sink.commit()
    finally:
        sink.close()
    assert laned > 10
    names = list(topics.values())
    assert committed(stack, names) == by_topic(want.produced, names)
