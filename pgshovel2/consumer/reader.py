"""SetReader: reads a set's topics from Kafka and yields its source
transactions, reassembled and validated (pgshovel2.consumer.reassembly).

One confluent_kafka Consumer with ``isolation.level=read_committed`` (only
committed Kafka transactions are seen; messages of a non-transactional
producer are always visible), manual assignment of every partition of the
selected data topics and of ``{prefix}.transactions``, and
``enable.partition.eof`` to know when it has caught up. No offsets are
committed: where to start is ``from_beginning`` (the oldest retained
message) or the end of the topics when the reader is created.
"""

import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    Message,
    TopicPartition,
)

from pgshovel2 import kafkaaccess, kafkaconf, kafkalog, wire
from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.dead_letters import DeadLetters
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.errors import ConsumerError, IncompleteTransactionError
from pgshovel2.consumer.model import Change, DataMessage, Transaction, TxnRecord
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.consumer.reassembly import Reassembler
from pgshovel2.consumer.topics import SetTopics
from pgshovel2.registryconf import Registry
from pgshovel2.txids import ConsistentPoint, TxidSnapshot, holds_snapshot_row, parse_handoff

log = logging.getLogger(__name__)
kafka_log = logging.getLogger("pgshovel2.consumer.kafka")  # librdkafka's own log lines, folded
kafka_log.addFilter(kafkalog.FoldFilter())
HEADERS = wire.DATA_HEADERS
Partition = tuple[str, int]


class SetReader:
    """Reads the source transactions of one replication set.

    topics: the set's topics (SetTopics.from_store / from_record; or use
    :meth:`for_set`). bootstrap: the Kafka settings (pgshovel2.kafkaconf.KafkaSettings), or
    the bootstrap servers with this process's (its PGSHOVEL_KAFKA_* variables); registry_url:
    the schema registry (Avro sets): pgshovel2.registryconf.RegistrySettings, or its URL.
    from_beginning: start at the oldest retained messages, else at the end of the topics as of now (data
    partitions' end offsets first, then the transactions topic's; data of
    transactions begun before that point is dropped as orphans).
    tables: restrict to these tables (``schema.table`` or unique bare name).
    assembly_timeout: seconds a transaction may wait for its data after its
    END was read without progress (IncompleteTransactionError).
    snapshot_chunk: most snapshot rows per snapshot Transaction.
    max_buffered: messages held per partition before it is paused.
    kafka_config: librdkafka consumer settings of the caller's, over everything else.
    start_offsets: (topic, partition) -> offset to start at (overrides
    from_beginning for those partitions; others start at the beginning).
    after_snapshot: the bootstrap's handoff -- a txid snapshot (TxidSnapshot or
    its text; trigger backend) or a slot's ConsistentPoint (or its X/Y text; logical backend):
    transactions it covers and the snapshot rows (op ``r``) of copied_tables are skipped
    -- they are in the bootstrap copy -- except, with a ConsistentPoint, snapshot rows
    whose position is after it (an online snapshot's, read after the copy: newer).
    :meth:`from_manifest` sets both. copied_tables: the tables (``schema.table``) the
    bootstrap filled; None: every table. Snapshot rows of the others (tables added to the
    set later, sent by an online snapshot) are never skipped.
    decode: False leaves data messages' keys and values undecoded: Change.key
    and Change.value are then the message bytes (None for a null key or a
    tombstone), decoded by the caller when needed (``reader.decoder``); a
    transaction held for reassembly then costs its bytes, not Python objects.

    Raises ConsumerError when Kafka cannot be reached or a topic is missing, KafkaAccessError
    when Kafka refuses the client's credentials or its ACLs deny reading the topics.
    Use as a context manager, or call close().
    """

    def __init__(self, topics: SetTopics, bootstrap: kafkaconf.Kafka, registry_url: Registry | None = None, *,
                 from_beginning: bool = True, tables: Iterable[str] | None = None,
                 assembly_timeout: float = 30.0, snapshot_chunk: int = 1000, max_buffered: int = 10000,
                 kafka_config: dict[str, Any] | None = None, timeout: float = 30.0,
                 start_offsets: dict[Partition, int] | None = None,
                 after_snapshot: TxidSnapshot | ConsistentPoint | str | None = None, decode: bool = True,
                 copied_tables: Iterable[str] | None = None):
        self.topics = topics.select(tables)
        self.decode = decode
        self.bootstrap, self.from_beginning = bootstrap, from_beginning
        self.assembly_timeout, self.max_buffered, self.timeout = assembly_timeout, max_buffered, timeout
        self.decoder = Decoder(registry_url)
        self.dead_letters = DeadLetters(bootstrap, kafka_config, timeout)  # what placeholders stand for
        self._consumer = kafkaconf.consumer(bootstrap, "reader", **{
            "isolation.level": "read_committed", "enable.partition.eof": True,
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "logger": kafka_log, **(kafka_config or {})})
        self._admin = kafkaconf.admin(bootstrap, logger=kafka_log)
        try:
            self.partitions = self._partitions()
            self._data = [(t.topic, p) for t in self.topics.tables for p in range(self.partitions[t.topic])]
            self._txn = (self.topics.transactions, 0)
            start = self._end_offsets() if not from_beginning else {tp: OFFSET_BEGINNING for tp in self._all}
            if start_offsets is not None:
                start = {tp: start_offsets.get(tp, OFFSET_BEGINNING) for tp in self._all}
            self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
            self._position: dict[Partition, int] = dict(start)  # next offset to read, as far as known
        except BaseException:
            self._consumer.close()
            raise
        mid_stream = not from_beginning or start_offsets is not None
        if isinstance(after_snapshot, str):
            after_snapshot = parse_handoff(after_snapshot)
        self.after_snapshot = after_snapshot
        # a transaction the start offsets cut (Reassembler's covered) is the bootstrap's when it covers it
        covered = after_snapshot.covers if start_offsets is not None and after_snapshot is not None else None
        self.reassembler = Reassembler(self.topics, self.partitions, drop_orphans=mid_stream,
                                       snapshot_chunk=snapshot_chunk, covered=covered)
        self.copied_tables = None if copied_tables is None else frozenset(copied_tables)
        self.skipped_visible = 0
        self.redelivered = 0  # messages the client gave again (_redelivered)
        self._paused: set[Partition] = set()
        self._closed = False

    @classmethod
    def for_set(cls, store: ClusterStore, set_name: str, bootstrap: kafkaconf.Kafka,
                registry_url: Registry | None = None, **options: Any) -> "SetReader":
        """A reader of set_name, whose record is read from ZooKeeper through store."""
        return cls(SetTopics.from_store(store, set_name), bootstrap, registry_url, **options)

    @classmethod
    def from_manifest(cls, manifest: Manifest | str, bootstrap: kafkaconf.Kafka, registry_url: Registry | None = None,
                      **options: Any) -> "SetReader":
        """A reader that continues a bootstrap exactly: snapshot + what it yields = the source.

        manifest: a Manifest or a bootstrap directory / manifest.json path
        (pgshovel2.bootstrap.manifest). Starts every partition at the
        manifest's Kafka offsets (read before the snapshot was exported) and
        skips snapshot rows and every transaction visible in the manifest's
        txid snapshot. Raises BootstrapError for an unusable manifest.
        """
        if not isinstance(manifest, Manifest):
            manifest = Manifest.load(manifest)
        topics = SetTopics.from_record(manifest.set_record)
        return cls(topics, bootstrap, registry_url, start_offsets=manifest.offsets(),
                   after_snapshot=manifest.handoff_point, **options)

    def __enter__(self) -> "SetReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the Kafka consumer (commits nothing). Idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()
            self.dead_letters.close()

    @property
    def _all(self) -> list[Partition]:
        return [*self._data, self._txn]

    def _partitions(self) -> dict[str, int]:
        """Topic -> partition count. Raises ConsumerError for a missing topic or no Kafka."""
        topics = [t.topic for t in self.topics.tables] + [self.topics.transactions]
        return partition_counts(self._admin, topics, self.bootstrap, f"of set {self.topics.set_name!r}",
                                self.timeout)

    def _end_offsets(self) -> dict[Partition, int]:
        """Committed end offsets (last stable offsets) now: data partitions FIRST, then the transactions topic.

        That order guarantees that data messages past the data end offsets
        whose BEGIN is before the transactions end offset are orphans (see
        pgshovel2.consumer.reassembly).
        """
        return end_offsets(self._admin, [self._data, [self._txn]], self.bootstrap, self.timeout)

    def transactions(self, until_caught_up: bool = False, idle_timeout: float | None = None,
                     poll_timeout: float = 0.2) -> Iterator[Transaction]:
        """Yield complete transactions (and snapshot chunks) in order, forever unless told to stop.

        until_caught_up: stop once every partition is read up to its end
        offset at the time of this call and every transaction begun before
        that point was yielded. idle_timeout: stop after this many seconds
        without a new message. Raises OrderError, IncompleteTransactionError,
        ConsumerError.
        """
        targets = self._end_offsets() if until_caught_up else {}
        stall_key, stall_since = None, time.monotonic()
        last_message = time.monotonic()
        while True:
            messages = self._consumer.consume(num_messages=500, timeout=poll_timeout)
            for msg in messages:
                where = (msg.topic(), msg.partition())
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        self._position[where] = msg.offset()  # the end offset reached
                    else:
                        self._kafka_error(msg)
                    continue
                if msg.offset() < self._position[where]:
                    self._redelivered(msg)
                    continue
                last_message = time.monotonic()
                self._position[where] = msg.offset() + 1
                self._feed(msg)
            for txn in self.reassembler.ready():
                txn = self._after_bootstrap(txn)
                if txn is None:
                    continue
                yield txn
                stall_since = time.monotonic()  # time spent in the caller does not count
            self._flow_control()
            missing = self.reassembler.missing()
            key = (missing.txid, tuple(sorted(missing.counts.items()))) if missing else None
            if key != stall_key:
                stall_key, stall_since = key, time.monotonic()
            elif missing and time.monotonic() - stall_since > self.assembly_timeout:
                raise IncompleteTransactionError(missing.txid, missing.counts, time.monotonic() - stall_since)
            if until_caught_up and all(self._position[tp] >= end for tp, end in targets.items()) \
                    and not self.reassembler.pending_before(targets[self._txn]):
                return
            if idle_timeout is not None and time.monotonic() - last_message > idle_timeout:
                return

    def _redelivered(self, msg) -> None:
        """A message below the partition's next offset came again (librdkafka has re-delivered
        messages after pause/resume in some versions): it was taken once already, so it is
        counted (:attr:`redelivered`), logged and not fed twice."""
        self.redelivered += 1
        log.warning("%s [%d] offset %d was read already (next offset %d): Kafka client re-delivery ignored",
                    msg.topic(), msg.partition(), msg.offset(), self._position[(msg.topic(), msg.partition())])

    def _after_bootstrap(self, txn: Transaction) -> Transaction | None:
        """txn without what the bootstrap of after_snapshot holds (None: nothing of it left): a
        transaction it covers, snapshot rows it copied (:meth:`_copied`)."""
        if self.after_snapshot is None:
            return txn
        if not txn.snapshot:
            if self.after_snapshot.covers(txn.txid, txn.position):
                self.skipped_visible += 1
                return None
            return txn
        kept = [change for change in txn.changes if not self._copied(change)]
        if len(kept) == len(txn.changes):
            return txn
        return replace(txn, changes=kept) if kept else None

    def _copied(self, row: Change) -> bool:
        """Whether the bootstrap holds snapshot row (op r): its table was copied and, for a logical
        set's ConsistentPoint, the row was emitted before the point (after it: an online snapshot's
        row, a state newer than the copy's)."""
        return holds_snapshot_row(self.after_snapshot, self.copied_tables, row.table, row.position)

    def _kafka_error(self, msg: Message) -> None:
        err = msg.error()
        what = f"cannot read {msg.topic()!r} [{msg.partition()}]"
        denied = kafkaaccess.denied(err, what, f"READ and DESCRIBE on topic {msg.topic()!r} and READ on the consumer "
                                               "groups of the group.id prefix (default pgshovel2)")
        if denied is not None:
            raise denied
        if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
            raise ConsumerError(f"cannot read {msg.topic()!r} [{msg.partition()}]: {err.str()}")
        log.warning("kafka: %s (retrying)", err.str())

    def _feed(self, msg: Message) -> None:
        where = f"{msg.topic()!r} [{msg.partition()}] offset {msg.offset()}"
        if msg.topic() == self.topics.transactions:
            datum = self.decoder.decode(msg.value(), f"the value of {where}")
            if not isinstance(datum, dict):
                raise ConsumerError(f"{where}: transaction record is {datum!r}, not a record")
            try:
                rec = TxnRecord.from_datum(datum, msg.partition(), msg.offset())
            except (KeyError, TypeError) as exc:
                raise ConsumerError(f"{where}: malformed transaction record {datum!r}") from exc
            self.reassembler.add_record(rec)
            return
        headers = {k: v.decode("utf-8") if v is not None else None for k, v in msg.headers() or ()}
        try:
            op, txid, position, ts_ms = (headers[h] for h in HEADERS)
            txid_n, ts_n = int(txid), int(ts_ms)
            version = int(headers.get(wire.VERSION) or 0)
            unchanged = _unchanged(headers.get(wire.UNCHANGED))
            truncated = json.loads(headers[wire.TRUNCATED]) if wire.TRUNCATED in headers else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConsumerError(f"{where}: missing or malformed pgshovel headers {headers!r} "
                                f"(needs {', '.join(HEADERS)}; {wire.UNCHANGED}: a JSON array of "
                                f"column names; {wire.TRUNCATED}: a JSON object)") from exc
        value, dead = msg.value(), headers.get(wire.DEAD_LETTER)
        if dead is not None:  # a placeholder: the message itself is in the dead-letter topic
            value = self.dead_letters.value(msg.topic(), position, msg.key(), dead)
            dead = json.loads(dead)["topic"]
        if self.decode:
            key, value = (self.decoder.decode(msg.key(), f"the key of {where}"),
                          self.decoder.decode(value, f"the value of {where}"))
        else:
            key = msg.key()
        self.reassembler.add_data(DataMessage(sys.intern(msg.topic()), msg.partition(), msg.offset(), op, txid_n,
                                              position, ts_n, key, value, version, unchanged, truncated, dead))

    def _flow_control(self) -> None:
        """Pause partitions holding max_buffered messages; resume them below half of it."""
        for tp in self._all:
            held = self.reassembler.backlog if tp == self._txn else self.reassembler.buffered(*tp)
            if tp not in self._paused and held >= self.max_buffered:
                self._consumer.pause([TopicPartition(*tp)])
                self._paused.add(tp)
            elif tp in self._paused and held < self.max_buffered // 2:
                self._consumer.resume([TopicPartition(*tp)])
                self._paused.discard(tp)


def _unchanged(header: str | None) -> frozenset[str]:
    """The column names of a ``pgshovel.unchanged`` header; ValueError when it is not a JSON
    array of strings."""
    if header is None:
        return frozenset()
    cols = json.loads(header)
    if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
        raise ValueError(f"{header!r} is not a JSON array of column names")
    return frozenset(cols)
