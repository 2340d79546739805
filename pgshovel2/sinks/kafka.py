"""Kafka sink: topic creation and an idempotent producer (acks=all).

The sink knows nothing of PgQ: the relay produces messages and calls
:meth:`KafkaSink.flush`, which returns only when every message is
acknowledged by the broker, or raises RelayError.
"""

import logging

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pgshovel2.config import TopicsConfig
from pgshovel2.errors import RelayError

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 500000,
    "queue.buffering.max.kbytes": 1048576,
    "message.max.bytes": MAX_MESSAGE_BYTES + 1024 * 1024,
}

Headers = list[tuple[str, str]]


class KafkaSink:
    """Produces to Kafka. bootstrap: ``host:port[,host:port]``; config: librdkafka overrides."""

    def __init__(self, bootstrap: str, config: dict | None = None):
        self.bootstrap = bootstrap
        self._producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, **(config or {})})
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._failed: list[str] = []
        self.produced = 0

    def ensure_topics(self, topics: dict[str, str], settings: TopicsConfig) -> list[str]:
        """Create missing topics; topics maps name -> cleanup.policy.

        Returns the names created. Raises RelayError naming a missing topic
        when creation is disabled, or when Kafka cannot be reached.
        """
        try:
            existing = set(self._admin.list_topics(timeout=15).topics)
        except KafkaException as exc:
            raise RelayError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        missing = [t for t in topics if t not in existing]
        if missing and not settings.create:
            raise RelayError(f"topic {missing[0]!r} does not exist and topic creation is "
                             "disabled (topics.create: false): create it first")
        new = [NewTopic(t, num_partitions=1 if t.endswith(".transactions") else settings.partitions,
                        replication_factor=settings.replication_factor,
                        config={"cleanup.policy": topics[t],
                                "max.message.bytes": str(MAX_MESSAGE_BYTES)})
               for t in missing]
        for topic, future in (self._admin.create_topics(new).items() if new else ()):
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RelayError(f"cannot create topic {topic!r}: {exc}") from exc
        return missing

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        """Enqueue one message; blocks (serving delivery reports) while the queue is full."""
        while True:
            try:
                self._producer.produce(topic, value, key, headers=headers, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise RelayError(f"cannot produce to {topic!r}: {exc}") from exc
        self.produced += 1
        self._producer.poll(0)

    def _delivered(self, err: KafkaError | None, msg) -> None:
        if err is not None:
            self._failed.append(f"topic {msg.topic()!r}, key {msg.key()!r:.80}: {err.str()}")

    def flush(self, timeout: float = 300.0) -> None:
        """Wait until every produced message is acknowledged (acks=all).

        Raises RelayError on any failed delivery or when timeout (s) passes.
        """
        remaining = self._producer.flush(timeout)
        if self._failed:
            first, count = self._failed[0], len(self._failed)
            self._failed.clear()
            raise RelayError(f"{count} message(s) not delivered to Kafka; first: {first}")
        if remaining:
            raise RelayError(f"{remaining} message(s) still unacknowledged by Kafka at "
                             f"{self.bootstrap} after {timeout:g}s")

    def close(self) -> None:
        """Flush what is pending (best effort)."""
        self._producer.flush(10)
