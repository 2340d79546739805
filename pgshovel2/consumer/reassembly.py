"""Reassembly of source transactions from a set's messages. Pure: no Kafka,
no I/O; the reader feeds it decoded messages and takes what is complete.

Rules (WIRE.md, docs/consumer.rst):

- The transactions topic gives the order: BEGIN, TRUNCATE* (and DDL marks:
  TABLE_DROPPED, SCHEMA_CHANGED, TOPIC_CHANGED, changes of ops ``drop``,
  ``schema``, ``topic``), END per source transaction. A transaction is complete when, for every selected topic, the
  number of its data messages taken equals END's count for that topic.
- Data messages are taken from partition heads only: a transaction's messages
  are contiguous and in order within a partition, so a head message either
  belongs to the open transaction (taken), to a later one (waits), is a
  snapshot row (txid 0, op ``r``: yielded at once, in chunks; one behind data of the open
  transaction in its partition -- an online snapshot's -- after that transaction), an orphan
  (dropped), or breaks the contract (OrderError).
- Orphans exist only when reading did not start at the beginning: data
  messages whose position is lower than the first BEGIN read, or whose txid
  is that of an END/TRUNCATE read before the first BEGIN.
- Positions of stream messages (txid != 0) never decrease within a partition
  (equal is allowed: both messages of a primary-key update share one).
  Snapshot rows (txid 0) are exempt: their positions are numbered within
  their snapshot, not in the stream's order.
"""

from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pgshovel2.consumer.errors import ConsumerError, OrderError
from pgshovel2.consumer.model import DDL_OPS, Change, DataMessage, Transaction, TxnRecord
from pgshovel2.consumer.topics import SetTopics

TAKE, WAIT, SNAPSHOT, ORPHAN = "take", "wait", "snapshot", "orphan"
# An online snapshot of a table starts / is complete (docs/wire.rst): kept in Reassembler.snapshot_marks
SNAPSHOT_MARKS = frozenset({"SNAPSHOT_BEGIN", "SNAPSHOT_END"})


@dataclass
class _Open:
    """The transaction being assembled."""

    begin: TxnRecord
    end: TxnRecord | None = None
    changes: list[Change] = field(default_factory=list)
    taken: Counter[str] = field(default_factory=Counter)
    parts: set[tuple[str, int]] = field(default_factory=set)  # (topic, partition) it took data from


@dataclass(frozen=True)
class Missing:
    """What the open transaction still waits for after its END: topic -> number of data messages."""

    txid: int
    counts: dict[str, int]


def _order_key(change: Change) -> tuple[str, int]:
    # A primary-key update is a tombstone then a create at one position, possibly in two partitions.
    return change.position, 0 if change.op == "d" else 1


class Reassembler:
    """Turns data messages and transaction records into complete transactions.

    topics: the set's topics (selected tables); partitions: data topic ->
    partition count; drop_orphans: True when reading did not start at the
    beginning; snapshot_chunk: most snapshot rows per yielded snapshot
    Transaction; covered: (txid, BEGIN position) -> whether a bootstrap the
    reading starts after holds that transaction (None: no bootstrap). Reading
    mid-stream, a transaction that can never complete (its missing data lies
    before the start offsets: commit markers reach partitions at their own
    moments, so the end offsets asked one after the other can cut a Kafka
    transaction) is dropped when covered says the bootstrap holds it.
    """

    def __init__(self, topics: SetTopics, partitions: dict[str, int], *, drop_orphans: bool,
                 snapshot_chunk: int = 1000, covered: Callable[[int, str], bool] | None = None):
        if snapshot_chunk < 1:
            raise ValueError("snapshot_chunk must be at least 1")
        self.topics, self.partitions = topics, partitions
        self.drop_orphans, self.snapshot_chunk = drop_orphans, snapshot_chunk
        self._tables = {t.topic: t.table for t in topics.tables}
        self._buffers: dict[tuple[str, int], deque[DataMessage]] = {}
        self._last_position: dict[tuple[str, int], str] = {}
        self._records: deque[TxnRecord] = deque()
        self._current: _Open | None = None
        self._chunk: list[Change] = []
        self._first_begin: str | None = None
        self.snapshot_marks: list[TxnRecord] = []  # SNAPSHOT_BEGIN/END records read (online snapshots)
        self._orphan_txids: set[int] = set()
        self._done: TxnRecord | None = None  # END of the last completed transaction
        self._moved = False
        self.orphans_dropped = 0
        self.covered = covered
        self.cut_dropped = 0  # transactions cut by the start offsets, held by the bootstrap

    # -- input ---------------------------------------------------------------------------------

    def add_data(self, msg: DataMessage) -> None:
        """Buffer a data message (in partition order). Raises OrderError if its position went back."""
        if msg.topic not in self._tables:
            raise ConsumerError(f"message from topic {msg.topic!r}, which this reader does not read")
        where = (msg.topic, msg.partition)
        if not msg.is_snapshot:
            last = self._last_position.get(where)
            if last is not None and msg.position < last:
                raise _error(f"position went back from {last}", msg)
            self._last_position[where] = msg.position
        self._buffers.setdefault(where, deque()).append(msg)

    def add_record(self, rec: TxnRecord) -> None:
        """Queue a transactions-topic record (in topic order)."""
        if rec.kind in SNAPSHOT_MARKS:
            self.snapshot_marks.append(rec)  # outside every transaction: not a step of reassembly
            return
        if rec.kind not in ("BEGIN", "END", "TRUNCATE") and rec.kind not in DDL_OPS:
            raise self._txn_error(f"unknown record type {rec.kind!r}", rec)
        last = self._last_position.get((self.topics.transactions, rec.partition))
        if last is not None and rec.position < last:
            raise self._txn_error(f"position went back from {last}", rec)
        self._last_position[(self.topics.transactions, rec.partition)] = rec.position
        self._records.append(rec)

    # -- state ---------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """True when no transaction is open or queued and no snapshot rows are held back."""
        return self._current is None and not self._records and not self._chunk

    def buffered(self, topic: str, partition: int) -> int:
        """Messages held for a data partition."""
        return len(self._buffers.get((topic, partition), ()))

    @property
    def backlog(self) -> int:
        """Transaction records not yet consumed."""
        return len(self._records)

    def pending_before(self, txn_offset: int) -> bool:
        """True while a transactions-topic record below txn_offset is queued or its transaction is open."""
        cur = self._current
        if cur is not None and cur.begin.offset < txn_offset:
            return True
        return bool(self._records) and self._records[0].offset < txn_offset

    def missing(self) -> Missing | None:
        """The open transaction's missing data once its END was read, else None."""
        cur = self._current
        if cur is None or cur.end is None:
            return None
        counts = {t: n - cur.taken[t] for t, n in self._wanted(cur.end).items() if cur.taken[t] < n}
        return Missing(cur.begin.txid, counts) if counts else None

    # -- output --------------------------------------------------------------------------------

    def ready(self) -> Iterator[Transaction]:
        """Yield every transaction and snapshot chunk complete now, in order.

        Raises OrderError when the messages break the contract (see module doc).
        """
        while True:
            self._moved = False
            if self._current is None:
                self._next_begin()
            if self._current is not None:
                self._absorb_records()
            yield from self._scan_heads()
            cur = self._current
            if cur is not None and self._cut_and_covered(cur):
                self._current, self._done, self._moved = None, cur.end, True
                self._orphan_txids.add(cur.begin.txid)  # its data still to come elsewhere: dropped too
                self.cut_dropped += 1
                continue
            if cur is not None and cur.end is not None and not self.missing():
                if self._chunk:
                    yield self._flush_chunk()
                txn = self._finish(cur)
                if txn is not None:
                    yield txn
                continue
            if not self._moved:
                break
        if self._chunk:
            yield self._flush_chunk()
        self._check_stuck()

    # -- steps ---------------------------------------------------------------------------------

    def _next_begin(self) -> None:
        while self._records:
            rec = self._records.popleft()
            self._moved = True
            if rec.kind == "BEGIN":
                if self._done is not None and rec.position <= self._done.position:
                    raise self._txn_error(f"BEGIN at or before the END of txid {self._done.txid}", rec)
                self._current = _Open(rec)
                if self._first_begin is None:
                    self._first_begin = rec.position
                return
            if self._first_begin is None and self.drop_orphans:
                self._orphan_txids.add(rec.txid)  # its BEGIN is before the start point
                continue
            raise self._txn_error(f"{rec.kind} record without a BEGIN", rec)

    def _absorb_records(self) -> None:
        cur = self._current
        while self._records and cur.end is None:
            rec = self._records[0]
            if rec.kind == "BEGIN":
                raise self._txn_error(f"BEGIN before the END of txid {cur.begin.txid}", rec)
            if rec.txid != cur.begin.txid:
                raise self._txn_error(f"{rec.kind} record inside transaction txid {cur.begin.txid}", rec)
            self._records.popleft()
            self._moved = True
            if rec.kind == "TRUNCATE":
                if self._selected(rec.table, rec):
                    cur.changes.append(Change(rec.table, self._tables[rec.table], "t", None, None, rec.txid,
                                              rec.position, rec.ts_ms, rec.partition, rec.offset))
                continue
            if rec.kind in DDL_OPS:
                self._ddl_mark(cur, rec)
                continue
            self._check_end(cur, rec)
            cur.end = rec

    def _ddl_mark(self, cur: _Open, rec: TxnRecord) -> None:
        """A DDL's mark on a table (TABLE_DROPPED, SCHEMA_CHANGED, TOPIC_CHANGED) as a Change of the
        transaction. Raises ConsumerError for a TOPIC_CHANGED to a topic this reader does not read
        (it was made from an older set record: the table's later changes would be missed)."""
        if not self._selected(rec.table, rec):
            return
        value = None
        if rec.kind == "TOPIC_CHANGED":
            new_topic = next(iter(rec.counts or {}), None)
            if new_topic not in self._tables and new_topic not in self.topics.unselected:
                raise ConsumerError(f"table {self._tables[rec.table]} goes on in topic {new_topic!r} from position "
                                    f"{rec.position} (a TOPIC_CHANGED record: pgshovel set accept-ddl --new-topic), "
                                    "which this reader does not read: restart it (it reads the set's topics anew)")
            value = {"new_topic": new_topic}
        cur.changes.append(Change(rec.table, self._tables[rec.table], DDL_OPS[rec.kind], None, value, rec.txid,
                                  rec.position, rec.ts_ms, rec.partition, rec.offset))

    def _check_end(self, cur: _Open, end: TxnRecord) -> None:
        counts = end.counts or {}
        if end.event_count is not None and end.event_count != sum(counts.values()):
            raise self._txn_error(f"END event_count {end.event_count} != sum of its per-topic counts "
                                  f"{sum(counts.values())}", end)
        for topic in counts:
            self._selected(topic, end)
        for topic, taken in cur.taken.items():
            if taken > counts.get(topic, 0):
                extra = [c for c in cur.changes if c.topic == topic and c.op != "t"][counts.get(topic, 0)]
                raise OrderError(f"data message beyond the END count {counts.get(topic, 0)} of txid "
                                 f"{cur.begin.txid} in its topic", topic=topic, partition=extra.partition,
                                 offset=extra.offset, txid=extra.txid, position=extra.position)

    def _scan_heads(self) -> Iterator[Transaction]:
        for buf in self._buffers.values():
            while buf:
                msg = buf[0]
                kind = self._classify(msg)
                if kind == WAIT:
                    break
                buf.popleft()
                self._moved = True
                if kind == ORPHAN:
                    self.orphans_dropped += 1
                elif kind == SNAPSHOT:
                    self._chunk.append(self._change(msg))
                    if len(self._chunk) >= self.snapshot_chunk:
                        yield self._flush_chunk()
                else:
                    cur = self._current
                    if msg.op != "t":  # a Debezium truncate event: the TRUNCATE record stands for it, in order
                        cur.changes.append(self._change(msg))
                    cur.taken[msg.topic] += 1
                    cur.parts.add((msg.topic, msg.partition))

    def _classify(self, msg: DataMessage) -> str:
        if msg.is_snapshot:
            if msg.op != "r":
                raise _error(f"txid 0 (snapshot) with op {msg.op!r}", msg)
            cur = self._current
            # behind the open transaction's data in its partition (an online snapshot's row): after it
            return WAIT if cur is not None and (msg.topic, msg.partition) in cur.parts else SNAPSHOT
        if msg.op == "r":
            raise _error("op 'r' (snapshot read) with a transaction's txid", msg)
        if self.drop_orphans and msg.txid in self._orphan_txids:
            return ORPHAN
        if self._first_begin is None:
            return WAIT
        if self.drop_orphans and msg.position < self._first_begin:
            return ORPHAN
        done = self._done
        if done is not None and msg.position <= done.position:
            what = f"beyond the END count of txid {done.txid}" if msg.txid == done.txid else "in no transaction"
            raise _error(f"data message {what}: at or before the END of completed txid {done.txid} "
                         f"(position {done.position})", msg)
        cur = self._current
        if cur is None:
            return WAIT
        if msg.position < cur.begin.position:
            raise _error(f"data message in no open transaction: before the BEGIN of txid {cur.begin.txid} "
                         f"(position {cur.begin.position})", msg)
        if msg.txid == cur.begin.txid:
            if cur.end is not None and cur.taken[msg.topic] >= (cur.end.counts or {}).get(msg.topic, 0):
                raise _error(f"data message beyond the END count {(cur.end.counts or {}).get(msg.topic, 0)} "
                             f"of txid {msg.txid} in this topic", msg)
            return TAKE
        if cur.end is not None and msg.position <= cur.end.position:
            raise _error(f"data message in no open transaction: inside txid {cur.begin.txid} "
                         f"(positions {cur.begin.position}..{cur.end.position})", msg)
        return WAIT

    def _past(self, topic: str) -> bool:
        """Every partition of topic holds a message already: what is missing there never comes."""
        heads = [self._buffers.get((topic, p)) for p in range(self.partitions.get(topic, 0))]
        return bool(heads) and all(heads)

    def _cut_and_covered(self, cur: _Open) -> bool:
        """Reading mid-stream after a bootstrap: cur can never complete and the bootstrap holds it."""
        if self.covered is None or not self.drop_orphans:
            return False  # no bootstrap to hold it: not even missing() on a plain reader's path
        missing = self.missing()
        return (missing is not None and any(self._past(topic) for topic in missing.counts)
                and self.covered(cur.begin.txid, cur.begin.position))

    def _check_stuck(self) -> None:
        missing = self.missing()
        if missing is None:
            return
        for topic, count in missing.counts.items():
            if self._past(topic):
                first = self._buffers[(topic, 0)][0]
                raise _error(f"transaction txid {missing.txid} can never complete: {count} message(s) of "
                             f"this topic are missing and every partition of the topic is already past it",
                             first)

    def _finish(self, cur: _Open) -> Transaction | None:
        self._current, self._done = None, cur.end
        if not cur.changes:
            return None  # nothing in the selected tables
        cur.changes.sort(key=_order_key)
        return Transaction(cur.begin.txid, cur.begin.position, cur.begin.ts_ms, cur.changes,
                           end_offset=cur.end.offset if cur.end is not None else None)

    def _flush_chunk(self) -> Transaction:
        chunk, self._chunk = self._chunk, []
        return Transaction(0, chunk[0].position, chunk[0].ts_ms, chunk, snapshot=True)

    # -- helpers -------------------------------------------------------------------------------

    def _change(self, msg: DataMessage) -> Change:
        return Change(msg.topic, self._tables[msg.topic], msg.op, msg.key, msg.value, msg.txid, msg.position,
                      msg.ts_ms, msg.partition, msg.offset, msg.version, msg.unchanged, msg.truncated,
                      msg.dead_letter)

    def _wanted(self, end: TxnRecord) -> dict[str, int]:
        return {t: n for t, n in (end.counts or {}).items() if t in self._tables}

    def _selected(self, topic: str | None, rec: TxnRecord) -> bool:
        if topic in self._tables:
            return True
        if topic in self.topics.unselected:
            return False
        raise self._txn_error(f"{rec.kind} names topic {topic!r}, which is not a table of set "
                              f"{self.topics.set_name!r} as this reader knows it (did the set change? "
                              "restart the reader)", rec)

    def _txn_error(self, message: str, rec: TxnRecord) -> OrderError:
        return OrderError(message, topic=self.topics.transactions, partition=rec.partition, offset=rec.offset,
                          txid=rec.txid, position=rec.position)


def _error(message: str, msg: DataMessage) -> OrderError:
    return OrderError(message, topic=msg.topic, partition=msg.partition, offset=msg.offset, txid=msg.txid,
                      position=msg.position)
