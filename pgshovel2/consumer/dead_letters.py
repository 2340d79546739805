"""A set's dead-letter topic, read back for the placeholders a reader meets (docs/wire.rst,
"Messages Kafka cannot take").

With the set's oversized policy ``dead-letter`` the relay writes a message Kafka could not take
on its own topic to ``{prefix}.dead-letter`` in chunks (key and headers as the message had them,
plus ``pgshovel.dead_letter.topic`` and ``pgshovel.dead_letter.chunk`` = ``i/n``), and in its
place a placeholder (empty value, header ``pgshovel.dead_letter``: JSON {topic, chunks, bytes})
-- in the same Kafka transaction, the chunks before the placeholder. :class:`DeadLetters` reads
the dead-letter topic (read_committed, from its start) until it has every chunk of the message a
placeholder stands for, and gives the message's value whole.
"""

import json
import logging
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from pgshovel2 import kafkaaccess, kafkaconf, wire
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.kafkaconf import Kafka

log = logging.getLogger(__name__)
Wanted = tuple[str, str, bytes | None]  # (data topic, position, key)


class DeadLetters:
    """Reads dead-letter topics (the one a placeholder names) for :meth:`value`.

    bootstrap: the Kafka settings (pgshovel2.kafkaconf), or the bootstrap servers with this
    process's; kafka_config: extra librdkafka consumer settings; timeout: seconds to wait
    for a chunk before ConsumerError (the chunks are committed with the placeholder, so they are
    there).
    """

    def __init__(self, bootstrap: Kafka, kafka_config: dict[str, Any] | None = None, timeout: float = 30.0):
        self.bootstrap, self.kafka_config, self.timeout = bootstrap, kafka_config or {}, timeout
        self._consumers: dict[str, Consumer] = {}
        self._chunks: dict[Wanted, dict[int, bytes]] = {}

    def value(self, topic: str, position: str, key: bytes | None, note: str) -> bytes:
        """The value of the message of topic at position with key that the placeholder with header
        note (``pgshovel.dead_letter``) stands for. Raises ConsumerError for a malformed note or
        when the dead-letter topic does not give every chunk within timeout."""
        try:
            info = json.loads(note)
            dead, chunks = info["topic"], int(info["chunks"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConsumerError(f"{topic!r} at position {position}: malformed {wire.DEAD_LETTER} header "
                                f"{note!r}") from exc
        want = (topic, position, key)
        while len(self._chunks.get(want, ())) < chunks:
            self._read(dead, want)
        got = self._chunks.pop(want)
        unit = position.split(":")[0]  # a reader meets transactions in order: older units are done
        for older in [w for w in self._chunks if w[1].split(":")[0] < unit]:
            del self._chunks[older]
        return b"".join(got[i] for i in range(1, chunks + 1))

    def _read(self, dead: str, want: Wanted) -> None:
        """Read the next message of the dead-letter topic dead into the chunks held."""
        consumer = self._consumers.get(dead)
        if consumer is None:
            consumer = self._consumers[dead] = kafkaconf.consumer(self.bootstrap, "dead-letters", **{
                "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True,
                **self.kafka_config})
            consumer.assign([TopicPartition(dead, 0, OFFSET_BEGINNING)])
        msg = consumer.poll(self.timeout)
        if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
            raise ConsumerError(f"the dead-letter topic {dead!r} holds no chunk of the message of {want[0]!r} at "
                                f"position {want[1]} (its placeholder says it is there)")
        if msg.error():
            what = f"cannot read the dead-letter topic {dead!r}"
            raise kafkaaccess.denied(msg.error(), what, f"READ and DESCRIBE on topic {dead!r} and READ on the consumer "
                                     "groups of the group.id prefix") or ConsumerError(f"{what}: {msg.error().str()}")
        headers = {k: v.decode("utf-8") for k, v in msg.headers() or () if v is not None}
        try:
            index = int(headers[wire.DEAD_LETTER_CHUNK].split("/")[0])
            of = (headers[wire.DEAD_LETTER_TOPIC], headers[wire.POSITION], msg.key())
        except (KeyError, ValueError) as exc:
            raise ConsumerError(f"{dead!r} offset {msg.offset()}: not a dead-letter chunk ({headers!r})") from exc
        self._chunks.setdefault(of, {})[index] = msg.value() or b""

    def close(self) -> None:
        """Close the consumers."""
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
