"""Kafka topics of a set: creating the missing ones and waiting until the broker serves them.

A new topic shows a leader in the metadata a moment before that leader serves it; producing to
it (or listing its offsets) meanwhile fails with NOT_LEADER_OR_FOLLOWER, so creation returns only
once every partition answers.
"""

import threading
import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from pgshovel2 import kafkaaccess
from pgshovel2.config import TopicsConfig
from pgshovel2.errors import RelayError, StopRequestedError, UnavailableError
from pgshovel2.kafkaconf import Kafka

# bytes: a topic's max.message.bytes (the producer's message.max.bytes allows 1 MiB of framing more)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# s: how long create_missing_topics waits for the partitions of the topics it created to be served
TOPIC_READY_TIMEOUT = 60.0
STEP = 1.0  # s: the longest single wait on librdkafka, so a stop request is seen within it


def _unserved(admin: AdminClient, topics: dict[str, int | None], timeout: float) -> dict[str, str]:
    """Topic -> why it is not served yet, for the topics (name -> partition count) not ready now."""
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        return {t: f"no metadata ({exc})" for t in topics}
    out: dict[str, str] = {}
    led: list[TopicPartition] = []
    for topic, count in topics.items():
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            out[topic] = f"not in the metadata yet ({info.error.str() if info is not None else 'unknown topic'})"
            continue
        parts = info.partitions
        wanted = range(count) if count is not None else sorted(parts)
        leaderless = [p for p in wanted if p not in parts or parts[p].leader < 0 or parts[p].error]
        if leaderless or not wanted:
            out[topic] = f"no leader for partition(s) {leaderless}" if leaderless else "no partitions yet"
        else:
            led += [TopicPartition(topic, p) for p in wanted]
    if led:  # a broker lists itself as leader before it serves the partition: ask the leader itself
        try:
            futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in led}, request_timeout=timeout)
        except KafkaException as exc:
            return {**out, **{tp.topic: f"cannot list offsets ({exc})" for tp in led}}
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                out.setdefault(tp.topic, f"partition {tp.partition}: {exc.args[0].str()}")
    return out


def wait_until_served(admin: AdminClient, topics: dict[str, int | None], bootstrap: Kafka,
                      timeout: float = TOPIC_READY_TIMEOUT, stop: threading.Event | None = None) -> None:
    """Return once every partition of topics (name -> partition count, None: as many as the
    metadata lists) is served by a leader.

    Served: the metadata names a leader for each partition, and that leader
    answers a ListOffsets request for it (the metadata shows a new leader a
    moment before the broker serves the partition). Checked every 0.1 s up
    to timeout (s); raises UnavailableError naming the first topic still not
    served (Kafka at bootstrap) and why, StopRequestedError when stop is set meanwhile.
    """
    deadline = time.monotonic() + timeout
    pending = dict(topics)
    while pending:
        remaining = deadline - time.monotonic()
        why = _unserved(admin, pending, max(1.0, min(STEP, remaining)))
        pending = {t: n for t, n in pending.items() if t in why}
        if not pending:
            return
        if time.monotonic() >= deadline:
            topic = min(pending)
            raise UnavailableError(f"topic {topic!r} was created in Kafka at {bootstrap} but is not ready for "
                                   f"use after {timeout:g}s: {why[topic]}"
                                   + (f" (and {len(pending) - 1} more topic(s))" if len(pending) > 1 else ""))
        if stop is not None and stop.wait(0.1):
            raise StopRequestedError(f"stopped while waiting for new topics to be served by Kafka at {bootstrap}")
        if stop is None:
            time.sleep(0.1)


def create_missing_topics(admin: AdminClient, bootstrap: Kafka, topics: dict[str, str], settings: TopicsConfig,
                          single_partition: frozenset[str] = frozenset(), stop: threading.Event | None = None
                          ) -> list[str]:
    """Create the missing topics (name -> cleanup.policy) with settings' partition count and
    replication factor (one partition for those in single_partition: ordered records).

    Returns the names created, once every partition of them is served by its
    leader (:func:`wait_until_served`, up to TOPIC_READY_TIMEOUT s). Raises
    RelayError naming a missing topic when creation is disabled (topics.create:
    false) or the broker refuses it, UnavailableError when Kafka at bootstrap
    cannot be reached or a created topic is not served in time,
    StopRequestedError when stop is set meanwhile.
    """
    try:
        existing = set(admin.list_topics(timeout=15).topics)
    except KafkaException as exc:
        denied = kafkaaccess.explain(admin, exc, f"cannot list the topics of Kafka at {bootstrap}",
                                     "DESCRIBE on the set's topics")
        raise denied or UnavailableError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    missing = [t for t in topics if t not in existing]
    if missing and not settings.create:
        raise RelayError(f"topic {missing[0]!r} does not exist and topic creation is "
                         "disabled (topics.create: false): create it first")
    new = [NewTopic(t, num_partitions=1 if t in single_partition else settings.partitions,
                    replication_factor=settings.replication_factor,
                    config={"cleanup.policy": topics[t], "max.message.bytes": str(MAX_MESSAGE_BYTES)})
           for t in missing]
    created: dict[str, int | None] = {t.topic: t.num_partitions for t in new}
    for topic, future in (admin.create_topics(new).items() if new else ()):
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                what = f"cannot create topic {topic!r}"
                raise kafkaaccess.denied(exc.args[0], what, f"CREATE on topic {topic!r} (an ACL on the set's topic "
                                         "prefix), or create it beforehand with topics.create: false") or \
                    RelayError(f"{what}: {exc}") from exc
            created[topic] = None  # created by someone else meanwhile, maybe with other settings
    wait_until_served(admin, created, bootstrap, stop=stop)
    return missing


# librdkafka codes meaning "Kafka did not answer", not "Kafka will not tell"
_UNANSWERED = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                         KafkaError.REQUEST_TIMED_OUT, KafkaError._WAIT_COORD, KafkaError.NOT_CONTROLLER})


def topic_max_message_bytes(admin: AdminClient, topic: str, timeout: float = 15.0) -> int | None:
    """The topic's effective ``max.message.bytes`` (its own setting, else the broker's
    ``message.max.bytes``), or None when Kafka will not tell (no DescribeConfigs permission, no
    such topic): the caller then assumes MAX_MESSAGE_BYTES, what the relay creates topics with.

    Raises UnavailableError when Kafka does not answer within timeout seconds (an outage is
    retried by the relay, not taken as an answer)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entry = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
        return int(entry["max.message.bytes"].value)
    except TimeoutError as exc:
        raise UnavailableError(f"Kafka did not describe topic {topic!r} within {timeout:g}s") from exc
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() in _UNANSWERED:
            raise UnavailableError(f"Kafka did not describe topic {topic!r}: {exc}") from exc
        return None
    except (KeyError, ValueError, TypeError):
        return None
