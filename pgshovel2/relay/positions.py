"""The relay's committed position, kept in Kafka next to the data it covers.

Each Kafka transaction of the relay ends with one position record on the
set's positions topic (``{prefix}.positions``, one partition, compacted, key
``{cluster}/{set}``), so the position is committed exactly when the messages
are. On start, after registering its transactional id (which completes or
aborts any earlier transaction), the relay reads the last committed record and
skips everything at or below it.
"""

import json
import time
import uuid
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pgshovel2.errors import RelayError, UnavailableError

BACKEND_TRIGGER = "trigger"


@dataclass(frozen=True)
class Position:
    """What of the source is in Kafka, for the trigger backend.

    tick: PgQ tick id (the cur_tick_id of the batch, from pgq.next_batch_info;
    for a snapshot, the consumer's last finished tick). ordinal: events of that
    batch committed (the next event ordinal to relay). complete: the whole
    batch is committed (only finish_batch may be missing). txid_snapshot: the
    handoff snapshot (``xmin:xmax:xip``) the stream filters against, or None
    when the initial snapshot was skipped. set_version: the set version in
    effect at this position (0: unknown, written before versions were
    recorded); batch_version: the one in effect at the start of the batch
    of tick, from which a restart replays a partly committed batch (0: as
    set_version). See pgshovel2.relay.control.
    """

    tick: int
    ordinal: int
    complete: bool
    txid_snapshot: str | None
    backend: str = BACKEND_TRIGGER
    set_version: int = 0
    committed_at_ms: int = 0
    batch_version: int = 0

    def covers(self, cur_tick: int) -> bool:
        """True when the batch ending at tick cur_tick is wholly in Kafka already."""
        return cur_tick < self.tick or (cur_tick == self.tick and self.complete)

    def skip(self, cur_tick: int) -> int:
        """Events at the start of batch ending at cur_tick that are already in Kafka."""
        return self.ordinal if cur_tick == self.tick and not self.complete else 0

    def start_version(self) -> int:
        """The set version a restarted relay starts from (0: unknown): a partly committed
        batch is not acknowledged, so it comes again and is replayed from its start."""
        if not self.complete and self.batch_version:
            return self.batch_version
        return self.set_version

    def encode(self) -> bytes:
        """JSON value of the position record (committed_at_ms set to now)."""
        data = asdict(self)
        data["committed_at_ms"] = int(time.time() * 1000)
        return json.dumps(data, sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> "Position":
        """Parse a position record value; raises RelayError when it is not one."""
        try:
            fields = json.loads(data)
            return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError) as exc:
            raise RelayError(f"unreadable position record {data[:200]!r}: {exc}") from exc


def read_position(bootstrap: str, topic: str, key: str, timeout: float = 30.0) -> Position | None:
    """The last committed position record with key on topic, None when there is none.

    Reads read_committed, backwards in growing windows from the end, so the
    cost does not grow with the topic. Raises UnavailableError when Kafka
    cannot be reached within timeout (s).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pgshovel2-position-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, 0)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as exc:
            raise UnavailableError(f"cannot read the relay position from {topic!r}: {exc}") from exc
        window = 64
        while True:
            start = max(low, high - window)
            found = _last_with_key(consumer, TopicPartition(topic, 0, start), key.encode(), timeout)
            if found is not None or start == low:
                return Position.decode(found) if found is not None else None
            window *= 16
    finally:
        consumer.close()


def _last_with_key(consumer: Consumer, tp: TopicPartition, key: bytes, timeout: float) -> bytes | None:
    consumer.assign([tp])
    last = None
    deadline = time.monotonic() + timeout
    while True:
        msg = consumer.poll(1.0)
        if msg is None:
            if time.monotonic() > deadline:
                raise UnavailableError(f"timed out reading the relay position from {tp.topic!r}")
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return last
            raise UnavailableError(f"cannot read the relay position from {tp.topic!r}: {msg.error()}")
        if msg.key() == key:
            last = msg.value()
