"""Committed end offsets (read_committed last stable offsets) of topic partitions."""

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pgshovel2 import kafkaaccess
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.kafkaconf import Kafka

Partition = tuple[str, int]


def end_offsets(admin: AdminClient, groups: list[list[Partition]], bootstrap: Kafka,
                timeout: float = 30.0) -> dict[Partition, int]:
    """(topic, partition) -> committed end offset, asked group after group, in order.

    The order matters to readers that start mid-stream: asking the data
    partitions before the transactions topic makes data past the data offsets
    whose BEGIN is before the transactions offset belong to transactions
    already visible (orphans, see pgshovel2.consumer.reassembly). It cannot
    rule out the opposite cut: a Kafka transaction's commit markers reach its
    partitions one by one, so a data partition may show it committed before
    the transactions topic does; its BEGIN/END then come after the start and
    some of its data before (Reassembler's covered drops it when a bootstrap
    holds it).
    Raises ConsumerError naming the topics when Kafka cannot answer.
    """
    out: dict[Partition, int] = {}
    for group in groups:
        if not group:
            continue
        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in group}
        try:
            futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=timeout)
            out.update({(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()})
        except KafkaException as exc:
            what = f"cannot read the end offsets of {sorted({t for t, _ in group})} from Kafka at {bootstrap}"
            raise kafkaaccess.explain(admin, exc, what, "DESCRIBE on these topics") or \
                ConsumerError(f"{what}: {exc}") from exc
    return out


def partition_counts(admin: AdminClient, topics: list[str], bootstrap: Kafka, what: str,
                     timeout: float = 30.0) -> dict[str, int]:
    """Topic -> partition count; raises ConsumerError naming a missing topic (what: e.g. "of set 'x'"),
    KafkaAccessError when Kafka refuses the client or denies it DESCRIBE on a topic."""
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise kafkaaccess.explain(admin, exc, f"cannot list the topics of Kafka at {bootstrap}", "DESCRIBE on the "
                                  "set's topics") or ConsumerError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    out = {}
    for topic in topics:
        info = meta.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            _check_described(admin, topic, what, timeout)
            raise ConsumerError(f"topic {topic!r} {what} does not exist in Kafka at {bootstrap} "
                                "(the relay creates it when it first starts)")
        out[topic] = len(info.partitions)
    return out


def _check_described(admin: AdminClient, topic: str, what: str, timeout: float) -> None:
    """Raise KafkaAccessError when topic is missing from the listing because Kafka denies the
    client DESCRIBE on it (a listing of all topics leaves such topics out without a word)."""
    try:
        info = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException:
        return
    if info is not None and info.error is not None:
        denied = kafkaaccess.denied(info.error, f"cannot read topic {topic!r} {what}",
                                    f"READ and DESCRIBE on topic {topic!r} (an ACL on the set's topic prefix)")
        if denied is not None:
            raise denied
