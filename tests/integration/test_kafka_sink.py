"""KafkaSink against the real broker with each producer it can drive (pgshovel2.sinks.producer):
the native one (pgshovel2_native.Producer, librdkafka through the rdkafka crate) and
confluent_kafka's. Both must give the same messages, the same transactions and the same errors;
the relay tests run the native one (the default), these run both."""

import os
import time
import uuid
from contextlib import contextmanager

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pgshovel2.config import TopicsConfig
from pgshovel2.errors import FencedError, RelayError, UnavailableError
from pgshovel2.sinks.kafka import KafkaSink

HEADERS = [("pgshovel.op", "c"), ("pgshovel.position", "0000000001/0000000002/0000000003"),
           ("pgshovel.set", "s\u00e9t"), ("raw", b"\x00\xff")]


def new_topic(stack, config: dict | None = None, partitions: int = 3) -> str:
    topic = f"sink-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result()
    return topic


def committed(stack, topic: str) -> list[tuple]:
    """[(key, value, headers as Kafka gives them)] of every committed message of topic."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"test-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out, pending = [], set(parts)
        while pending:
            msg = consumer.poll(30)
            assert msg is not None, f"nothing from {topic} in 30 s"
            if msg.error():
                pending.discard(msg.partition())
            else:
                out.append((msg.key(), msg.value(), msg.headers()))
        return out
    finally:
        consumer.close()


@contextmanager
def rivals(stack, topic: str):
    """(first, second): two sinks of one transactional id, as two relays of one set; closed on exit."""
    first, second = KafkaSink(stack.bootstrap, f"test-{topic}"), KafkaSink(stack.bootstrap, f"test-{topic}")
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_the_sink_makes_the_producer_asked_for(stack, producer_kind):
    sink = KafkaSink(stack.bootstrap)
    try:
        assert (type(sink._producer).__module__ == "pgshovel2_native") == (producer_kind == "native")
    finally:
        sink.close()


def test_committed_messages_are_read_as_produced(stack, producer_kind):
    topic = f"sink-{uuid.uuid4().hex[:10]}"
    sink = KafkaSink(stack.bootstrap, f"test-{topic}")
    try:
        sink.ensure_topics({topic: "delete"}, TopicsConfig(partitions=3))
        sink.start()
        sink.produce(topic, b"k1", b"v1", HEADERS)
        sink.produce(topic, None, b"null key", [])
        sink.produce_many([(topic, b"k2", b"v2", HEADERS), (topic, b"k3", None, HEADERS)])
        sink.commit()
        sink.produce(topic, b"aborted", b"x", HEADERS)
        sink.abort()
        sink.produce_many([(topic, b"k4", b"v4", list(HEADERS))])
        sink.commit()
    finally:
        sink.close()
    got = committed(stack, topic)
    wire = [(n, v.encode() if isinstance(v, str) else v) for n, v in HEADERS]
    assert sorted(got, key=lambda m: m[0] or b"") == [
        (None, b"null key", None), (b"k1", b"v1", wire), (b"k2", b"v2", wire), (b"k3", None, wire),
        (b"k4", b"v4", wire)]


def test_a_relay_started_later_fences_this_one(stack, producer_kind):
    topic = new_topic(stack)
    with rivals(stack, topic) as (first, second):
        first.start()
        first.produce(topic, b"k", b"from the first", [])
        first.commit()
        first.produce(topic, b"k", b"open when fenced", [])
        second.start()
        with pytest.raises(FencedError, match="another relay of this set took over"):
            first.produce(topic, b"k", b"after", [])
            first.commit(timeout=30)
        second.produce(topic, b"k", b"from the second", [])
        second.commit()
    assert [v for _, v, _ in committed(stack, topic)] == [b"from the first", b"from the second"]


def test_a_fenced_relay_is_told_so_when_it_produces_after_librdkafka_learned_it(stack, producer_kind):
    """The producer knows it is fenced before the sink does (a message on its way was refused):
    the next produce is refused with librdkafka's generic fatal error, which the sink must still
    name as fencing, not as some fatal error."""
    topic = new_topic(stack)
    with rivals(stack, topic) as (first, second):
        first.start()
        second.start()
        first.produce(topic, b"k", b"fenced on its way", [])
        time.sleep(3)  # librdkafka sends it and learns of the fencing; nothing polls meanwhile
        with pytest.raises(FencedError, match="another relay of this set took over"):
            first.produce(topic, b"k", b"after", [])
            first.commit(timeout=30)


def test_a_relay_fenced_before_its_commit_is_told_so_by_the_commit(stack, producer_kind):
    """Fenced between its produce and its commit, with the message already sent: the commit is
    refused as fenced (librdkafka learns it from the EndTxn), and the error events served after
    that refusal (confluent_kafka's poll raises the fatal error) still name it as fencing."""
    topic = new_topic(stack)
    with rivals(stack, topic) as (first, second):
        first.start()
        first.produce(topic, b"k", b"sent, then fenced", [])
        first._producer.flush(30)  # on the broker, in the open transaction
        second.start()
        with pytest.raises(FencedError, match="cannot commit the Kafka transaction: another relay"):
            first.commit(timeout=30)
        second.produce(topic, b"k", b"from the second", [])
        second.commit()
    assert [v for _, v, _ in committed(stack, topic)] == [b"from the second"]


def test_an_undelivered_message_fails_the_commit_naming_it(stack, producer_kind):
    """Kafka refused the message as too large (the sink's own produce does not check sizes: the
    relay's emitter does, pgshovel2.relay.emit.oversized): an error that is not retried, naming it."""
    topic = new_topic(stack, {"max.message.bytes": "2000"}, partitions=1)
    sink = KafkaSink(stack.bootstrap)  # idempotent-only: the delivery report is what tells
    try:
        sink.produce(topic, b"too big", os.urandom(50_000), [])  # lz4 would shrink a repeated byte
        with pytest.raises(RelayError, match=rf"^Kafka refused a message as too large \(topic '{topic}', key "
                                             r"b'too big': Broker: Message size too large\)") as raised:
            sink.commit(timeout=60)
        assert not isinstance(raised.value, UnavailableError)
    finally:
        sink.close()


def test_a_full_queue_is_waited_out(stack, producer_kind):
    topic = new_topic(stack)
    sink = KafkaSink(stack.bootstrap, f"test-{topic}", {"queue.buffering.max.messages": 50})
    batch = [(topic, str(i).encode(), b"v" * 100, HEADERS) for i in range(2_000)]
    try:
        sink.start()
        sink.produce_many(batch)
        for i in range(500):
            sink.produce(topic, b"one-%d" % i, b"v", [])
        sink.commit()
    finally:
        sink.close()
    assert len(committed(stack, topic)) == 2_500


def test_kafka_that_does_not_answer_is_named(producer_kind, caplog):
    sink = KafkaSink("127.0.0.1:1", "test-nobody")
    try:
        with pytest.raises(UnavailableError, match="cannot register transactional id 'test-nobody' at 127.0.0.1:1"):
            sink.start(timeout=3)
    finally:
        sink.close()
    assert any("Kafka: " in r.message and "Connection refused" in r.message for r in caplog.records
               if r.levelname == "WARNING"), "librdkafka's error events were not logged"
