"""Reading the relay's committed position back from its positions topic (pgshovel2.wire)."""

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pgshovel2 import kafkaaccess, kafkaconf
from pgshovel2.errors import StopRequestedError, UnavailableError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.wire import Position


def read_position(bootstrap: Kafka, topic: str, key: str, timeout: float = 30.0,
                  stop: threading.Event | None = None) -> Position | None:
    """The last committed position record with key on topic (``{cluster}/{set}``), None when
    there is none.

    Reads read_committed up to the topic's end as of the call (a running relay keeps writing:
    it never waits for more), backwards in growing windows, so the cost does not grow with
    the topic. bootstrap: the Kafka settings (pgshovel2.kafkaconf). Raises UnavailableError when
    Kafka does not answer within timeout (s), KafkaAccessError when it refuses the client or
    denies it READ on the topic, StopRequestedError when stop is set meanwhile.
    """
    stop = stop or threading.Event()
    consumer = kafkaconf.consumer(bootstrap, "position", **{"enable.auto.commit": False,
                                                            "isolation.level": "read_committed",
                                                            "enable.partition.eof": True})
    what = f"cannot read the relay position from {topic!r}"
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        except KafkaException as exc:
            raise _refused(consumer, exc, topic) or UnavailableError(f"{what}: {exc}") from exc
        window = 64
        while True:
            start = max(low, high - window)
            found = _last_with_key(consumer, TopicPartition(topic, 0, start), high, key.encode(), timeout, stop)
            if found is not None or start == low:
                return Position.decode(found) if found is not None else None
            window *= 16
    finally:
        consumer.close()


def _last_with_key(consumer: Consumer, tp: TopicPartition, high: int, key: bytes, timeout: float,
                   stop: threading.Event) -> bytes | None:
    """The value of the last message with key from tp's offset to offset high (exclusive)."""
    consumer.assign([tp])
    last = None
    deadline = time.monotonic() + timeout
    while True:
        msg = consumer.poll(0.5)
        if stop.is_set():
            raise StopRequestedError(f"stopped while reading the relay position from {tp.topic!r}")
        if msg is None:
            if time.monotonic() > deadline:
                raise UnavailableError(f"timed out reading the relay position from {tp.topic!r}")
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return last
            what = f"cannot read the relay position from {tp.topic!r}"
            raise kafkaaccess.denied(msg.error(), what, f"READ and DESCRIBE on topic {tp.topic!r} and READ on the "
                                     "consumer groups of the group.id prefix") or \
                UnavailableError(f"{what}: {msg.error()}")
        if msg.key() == key:
            last = msg.value()
        if msg.offset() >= high - 1:
            return last


def _refused(consumer: Consumer, exc: KafkaException, topic: str) -> kafkaaccess.KafkaAccessError | None:
    """The access error behind a failed watermark query of topic: the client's credentials, or no
    DESCRIBE on the topic (librdkafka then says "Unknown partition", as for a missing topic)."""
    what = f"cannot read the relay position from {topic!r}"
    found = kafkaaccess.explain(consumer, exc, what, f"READ and DESCRIBE on topic {topic!r}")
    if found is not None or exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
        return found
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException:
        return None
    return kafkaaccess.denied(info.error if info is not None else None, what, f"READ and DESCRIBE on topic {topic!r}")
