"""pgoutput's logical replication messages (protocol version 1) -> the items our plugin's records
give (:class:`pgshovel2.relay.logical.source.RecordDecoder`); no I/O.

Formats: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html. Begin
is held back until the transaction's first change (PostgreSQL 14 sends empty transactions; our
plugin writes nothing for them). Values are output-function text turned into capture forms by
the table's converters: by the native decoder when the native module is on
(native/src/pgoutput.rs: a change's rows as capture JSON text, as our plugin's raw rows are; a
change it leaves to Python by :mod:`pgshovel2.relay.logical.pgoutput.relations`, rows as lists). A
Relation message (the table's layout, sent before its first change in a session and after an
ALTER TABLE) is held until the relation's next change, which is preceded by a
:class:`RelationLayout` (the source turns a new layout into a schema-change Control,
:mod:`pgshovel2.relay.logical.relation_layout`) and a :class:`Redo` of the change, decoded once the
source (:meth:`PgoutputDecoder.settle`) has settled the layout. A Relation that still does not
hold the set's columns with their types then stops the stream (RelayError naming the table): a
wrong row is never written. Transactional messages with prefix ``pgshovel2.version`` (``set
upgrade``) are set-version Controls at their place; those with prefix ``pgshovel2.rows``
(a TRUNCATE, DETACH or ATTACH of a partition) are the DELETEs or INSERTs of the rows it moved
(:mod:`pgshovel2.relay.logical.pgoutput.rows`).
"""

import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pgshovel2.codec import native
from pgshovel2.codec.rows import as_values
from pgshovel2.errors import RelayError
from pgshovel2.names import qualified
from pgshovel2.relay.logical.pgoutput import rows as row_messages
from pgshovel2.relay.logical.pgoutput.messages import (
    BEGIN_FIELDS,
    COMMIT_FIELDS,
    HEARTBEAT_PREFIX,
    U32,
    VERSION_PREFIX,
    logical_message,
    relation,
    truncated,
)
from pgshovel2.relay.logical.pgoutput.relations import MappedRelation, SetTable, map_relation, python_rows
from pgshovel2.relay.logical.relation_layout import LayoutColumn, Redo, RelationLayout
from pgshovel2.relay.logical.runs import BEGIN, COMMIT, PG_EPOCH_US, RunMaker, TxnReads
from pgshovel2.relay.source import (
    RUN_MAX,
    SET_VERSION,
    Begin,
    Change,
    ChangeRun,
    Commit,
    Control,
    Item,
    TxnBounds,
)
from pgshovel2.wire import LOGICAL, Position, position_prefix

_OPS = {b"I": "I", b"U": "U", b"D": "D"}  # a change message's kind -> Change.op
_IUD = frozenset(b"IUD")


class PgoutputDecoder(RunMaker):
    """Turns pgoutput messages into items (:meth:`feed`); the attributes of RecordDecoder
    (ends, last_lsn, subset_tags) mean the same. tables: the set's tables by tag.
    xid_reference: a full transaction id (epoch << 32 | xid) near the decoded transactions,
    to widen Begin's 32-bit xid: set it before streaming (:meth:`set_xid_reference`).
    tag_of: relation OID -> the set's tag of that table (set before streaming): a relation is
    mapped by its OID, so a renamed table (its Relation message names it anew) stays its table;
    one not in it by its name. others: the publication is a DBA's (``publication: {existing: NAME}``),
    which may send tables the set does not capture (now: another set's, or one a set upgrade adds
    from its marker on): their changes are passed over, where a table not in the set's own
    publication is an error."""

    def __init__(self, tables: dict[str, SetTable], slot: str = "(slot)", others: bool = False):
        self.tables, self.slot, self.others = tables, slot, others
        self.tag_of: dict[int, str] = {}
        self.tags = list(tables)  # the set's tags by ChangeRun table index (a new list per set version)
        self.subset_tags: set[str] = set()
        self.ends: deque[tuple[int, int]] = deque()
        self.last_lsn: int | None = None
        self._relations: dict[int, MappedRelation] = {}
        self._raw: dict[int, tuple[str, str, list[tuple[str, int, int]]]] = {}  # oid -> schema, name, columns
        self._pending: set[int] = set()  # relations whose layout came and is not settled yet
        self.skip_through: Position | None = None  # units it reaches fully are in Kafka (set before streaming)
        self._skip = False
        self._opening: list[Item] = []  # the Begin lane_record opened, for opening()
        self._xid_ref = 0
        self._begin: Begin | None = None
        self._open = False
        self._unit = self._txid = self._ts_ms = self._ordinal = 0

    def set_xid_reference(self, full_xid: int) -> None:
        """A recent full xid (``txid_snapshot_xmax(txid_current_snapshot())``)."""
        self._xid_ref = full_xid

    def _full_xid(self, xid: int) -> int:
        delta = (xid - self._xid_ref) & 0xFFFFFFFF
        return self._xid_ref + (delta - (1 << 32) if delta >= 1 << 31 else delta)

    def feed(self, data: bytes, wal_start: int) -> list[Item]:
        """The items of one message; wal_start: the XLogData's start LSN (a change's LSN).
        Raises RelayError for an unknown message or a Relation that does not fit the set."""
        kind = data[:1]
        if kind in (b"I", b"U", b"D"):
            return self._change(kind, data, wal_start)
        handler = self._HANDLERS.get(kind)
        if handler is None:
            raise RelayError(f"unknown pgoutput message {kind!r} on slot {self.slot}")
        return handler(self, data, wal_start)

    def _on_begin(self, data: bytes, _lsn: int) -> list[Item]:
        commit_lsn, ts_us, xid = BEGIN_FIELDS.unpack_from(data, 1)
        ts_us += PG_EPOCH_US
        txid = self._full_xid(xid)
        self._unit, self._txid, self._ts_ms, self._ordinal = commit_lsn, txid, ts_us // 1000, 0
        self._begin, self._open = Begin(txid, self._ts_ms, commit_lsn, 0, ts_us, self.last_lsn), False
        self._skip = self.skip_through is not None and self.skip_through.reaches(commit_lsn, 0, True)
        return []

    def _opened(self) -> list[Item]:
        if self._open or self._begin is None:
            return []
        self._open = True
        return [self._begin]

    def _on_commit(self, data: bytes, _lsn: int) -> list[Item]:
        _flags, commit_lsn, end_lsn, _ts = COMMIT_FIELDS.unpack_from(data, 1)
        if not self._open:  # nothing of the set's tables: our plugin writes nothing either
            self._begin = None
            return []
        self._open, self._begin = False, None
        self.ends.append((commit_lsn, end_lsn))
        self.last_lsn = end_lsn
        return [Commit(self._txid, self._ts_ms, commit_lsn, self._ordinal, True)]

    def _on_message(self, data: bytes, _lsn: int) -> list[Item]:
        transactional, lsn, prefix, content = logical_message(data)
        if transactional and prefix == VERSION_PREFIX:
            items = self._opened()
            items.append(Control(self._txid, self._ts_ms, SET_VERSION, json.loads(data[content:]), "", None,
                                 self._unit, self._ordinal))
            return items
        if transactional and prefix == row_messages.ROWS_PREFIX:
            return self._moved_rows(data[content:], lsn)
        if transactional or prefix != HEARTBEAT_PREFIX:
            return []
        self.ends.append((lsn, lsn))
        self.last_lsn = lsn
        return [Commit(None, int(time.time() * 1000), lsn, 0, True)]

    def _moved_rows(self, content: bytes, lsn: int) -> list[Item]:
        """The DELETEs or INSERTs of rows a TRUNCATE, DETACH or ATTACH of a partition moved (a
        pgshovel2.rows message, :mod:`pgshovel2.relay.logical.pgoutput.rows`), at the message's place."""
        found = row_messages.rows(content, self.slot, self.tables)
        if found is None:
            return []
        op, tag, values = found
        items = self._opened()
        for row in values:
            items.append(Change(self._txid, self._ts_ms, op, row, tag, None, self._unit, self._ordinal, lsn))
            self._ordinal += 1
        return items

    def _on_relation(self, data: bytes, _lsn: int) -> list[Item]:
        oid, schema, name, columns = relation(data)
        self._raw[oid] = (schema, name, columns)
        self._relations.pop(oid, None)
        self._pending.add(oid)
        return []

    def _layout(self, oid: int) -> RelationLayout:
        schema, name, columns = self._raw[oid]
        cols = tuple(LayoutColumn(c, t, m) for c, t, m in columns)
        return RelationLayout(self._tag(oid), oid, schema, name, cols, False, self._txid, self._ts_ms,
                              self._unit, self._ordinal)

    def _tag(self, oid: int) -> str:
        """The set's tag of relation oid: by its OID (tag_of), else its name in its Relation message."""
        return self.tag_of.get(oid) or qualified(*self._raw[oid][:2])

    def settle(self, layout: RelationLayout) -> None:
        """The source has handled layout (and the loop switched to it, if it was new): map the
        relation's columns to the set's from now on. Raises RelayError when they do not fit."""
        self._pending.discard(layout.oid)
        self._map(layout.oid)

    def update(self, tables: dict[str, SetTable]) -> None:
        """The set's tables from now on (a new set version): relations mapped so far are mapped
        again; one that no longer fits waits for its layout to be settled again."""
        self.tables, self.tags = tables, list(tables)
        for oid in list(self._relations):
            try:
                self._map(oid)
            except RelayError:
                self._relations.pop(oid)
                self._pending.add(oid)

    def _map(self, oid: int) -> None:
        _, _, columns = self._raw[oid]
        tag = self._tag(oid)
        by_name = {c: (i, t) for i, (c, t, _) in enumerate(columns)}
        index = self.tags.index(tag) if tag in self.tables else 0
        self._relations[oid] = map_relation(self.tables.get(tag), tag, by_name, self.slot, index)

    def _relation(self, oid: int) -> MappedRelation:
        rel = self._relations.get(oid)
        if rel is None:
            raise RelayError(f"pgoutput sent a change of relation {oid} before its Relation message")
        return rel

    def _change(self, kind: bytes, data: bytes, lsn: int) -> list[Item]:
        (oid,) = U32.unpack_from(data, 1)
        if oid in self._pending:
            if self.others and self._tag(oid) not in self.tables:
                return []  # not the set's table (yet): its layout counts from its set version on
            if self._skip:
                return []  # in Kafka already (the loop would skip it); its layout is settled when it counts
            items = self._opened()
            items += [self._layout(oid), Redo(data, lsn)]
            return items
        rel = self._relations.get(oid)
        if rel is None:
            rel = self._relation(oid)  # raises
        rows = self._rows(rel, kind, data)
        if rows is None:
            return []
        change = Change(self._txid, self._ts_ms, _OPS[kind], rows[0], rel.tag, rows[1], self._unit, self._ordinal,
                        lsn, rows[2])
        self._ordinal += 1
        if self._open:  # the usual case: one list, no call (this runs per change)
            return [change]
        items = self._opened()
        items.append(change)
        return items

    def lane_record(self, data: bytes, lsn: int) -> tuple | None:
        """The ChangeRun record of a message the native lane may take (pgshovel2.relay.emit.lane), or
        None: an I/U/D change in a begun transaction of a relation mapped with a native decoder,
        of a table captured whole. The record: (the relation's PgoutputRows, its table index in
        :attr:`tags`, data, lsn, the relation); lsn: the message's XLogData start. A transaction's
        first such change opens it: :meth:`opening` then gives its Begin, for before the run."""
        if data[0] not in _IUD or (not self._open and self._begin is None):
            return None
        rel = self._relations.get(U32.unpack_from(data, 1)[0])
        if rel is None or rel.native is None or (self.subset_tags and rel.tag in self.subset_tags):
            return None
        if not self._open:
            self._opening = self._opened()
        return rel.native, rel.index, data, lsn, rel

    def txn_run(self, msg, read: Callable[[], object | None], committed: int,
                may_read: Callable[[object], bool]) -> TxnReads:
        """The TxnReads (lane_reads) of pgoutput, without a Begin and a Commit item per transaction (as
        RecordDecoder.txn_run): the whole transactions from msg, a Begin whose commit LSN is above
        committed, that read() gives, every change of them one :meth:`lane_record` would take,
        RUN_MAX change records at most; may_read(commit) at each Commit, whether the stream may be
        read on. ``ends``, ``last_lsn`` and the transaction state come out as if every message had
        been fed; a transaction the run cannot finish (a Relation, a Truncate, a message, a change
        left to Python, an empty transaction) is fed from its Begin (``opening``, its changes read
        so far in ``partial``)."""
        records: list = []
        txns: list[TxnBounds] = []
        last = msg
        relations, subset = self._relations, self.subset_tags
        unpack_oid, ends = U32.unpack_from, self.ends
        while msg is not None:
            begin = last = msg
            data = begin.payload
            if data[0] != BEGIN:
                break
            unit, ts_us, xid = BEGIN_FIELDS.unpack_from(data, 1)
            if unit <= committed:
                break
            start = len(records)
            while (msg := read()) is not None:
                last, data = msg, msg.payload
                if data[0] not in _IUD or len(records) == RUN_MAX:
                    break
                rel = relations.get(unpack_oid(data, 1)[0])  # a Relation message unmaps it until settled
                if rel is None or rel.native is None or (subset and rel.tag in subset):
                    break
                records.append((rel.native, rel.index, data, msg.data_start, rel))
            if msg is None or data[0] != COMMIT or len(records) == start:
                return self._unfinished(records, txns, start, begin, msg, last)
            _flags, commit_lsn, end_lsn, _ts = COMMIT_FIELDS.unpack_from(data, 1)
            ts_us += PG_EPOCH_US
            txns.append(TxnBounds(start, len(records), self._full_xid(xid), ts_us // 1000, ts_us, self.last_lsn,
                                  position_prefix(LOGICAL, unit), 0, unit))
            ends.append((commit_lsn, end_lsn))
            self.last_lsn = end_lsn
            msg = read() if may_read(msg) else None
        return self._whole(records, txns, msg, last)

    def txn_scan(self, read: Callable[[], object | None], msg, committed: int, confirmed: int) -> TxnReads | None:
        """:meth:`txn_run` made natively (``pgoutput_scan``, native/src/stream/scan.rs) over read (a
        replication cursor's read_message), without a Python object per Begin and Commit; None when
        the native module does not have it. confirmed: as RecordDecoder.txn_scan's."""
        scan = getattr(native.module(), "pgoutput_scan", None)
        if scan is None:
            return None
        return self.scanned(scan(read, msg, committed, RUN_MAX, confirmed, self.last_lsn, TxnBounds, self._relations,
                                 self.subset_tags, self._xid_ref))

    def _whole(self, records: list, txns: list[TxnBounds], msg, last) -> TxnReads:
        """What txn_run read when every transaction it read is whole: the run, the decoder's state
        that of the last transaction's end."""
        if txns:
            txn = txns[-1]
            self._unit, self._txid, self._ts_ms, self._ordinal = txn.unit, txn.txid, txn.ts_ms, 0
            self._begin, self._open, self._skip = None, False, False
        return TxnReads(self.whole_txns(records, txns), [], [], msg, last)

    def _unfinished(self, records: list, txns: list[TxnBounds], start: int, begin, msg, last) -> TxnReads:
        """What txn_run read when the transaction at records[start:] (opened by begin, a Begin
        message) cannot be finished in the run: the run before it, its Begin item when it has
        changes read (they go on as a ChangeRun of partial; else the Begin stays held) and them."""
        partial = records[start:]
        del records[start:]
        self.feed(begin.payload, begin.data_start)
        opening = self._opened() if partial else []
        return TxnReads(self.whole_txns(records, txns), opening, partial, msg, last)

    def opening(self) -> list[Item]:
        """[the Begin] of the transaction :meth:`lane_record` opened since the last call, else []."""
        items, self._opening = self._opening, []
        return items

    def _expand(self, run: ChangeRun, start: int, stop: int) -> list[Change]:
        """ChangeRun.expand: the Changes of run.records[start:stop] (a table captured whole: none is dropped)."""
        out = []
        for i in range(start, stop):
            _, _, data, lsn, rel = run.records[i]
            kind = data[:1]
            row, before, unchanged = self._rows(rel, kind, data)
            out.append(Change(run.txid, run.ts_ms, _OPS[kind], row, rel.tag, before, run.unit, run.ordinal + i, lsn,
                              unchanged))
        return out

    def _rows(self, rel: MappedRelation, kind: bytes, data: bytes) -> tuple[Any, Any, tuple] | None:
        """(row, before, unchanged positions) of a change message of rel, natively when its decoder
        takes it; None when the capture trigger would write no event (an update of a subset table
        that changes none of its columns)."""
        got = rel.native.change(data) if rel.native is not None else None
        if got is None:
            return python_rows(rel, kind, data, self.tables[rel.tag].table, rel.tag in self.subset_tags)
        row, before, _ = got
        if kind == b"U" and before is not None and rel.tag in self.subset_tags and as_values(before) == as_values(row):
            return None
        return got

    def _on_truncate(self, data: bytes, lsn: int) -> list[Item]:
        items = self._opened()
        for oid in truncated(data):
            tag = self._tag(oid) if oid in self._raw else self._relation(oid).tag
            if self.others and tag not in self.tables:
                continue
            items.append(Change(self._txid, self._ts_ms, "T", None, tag, None, self._unit, self._ordinal, lsn))
            self._ordinal += 1
        return items

    def _ignore(self, _data: bytes, _lsn: int) -> list[Item]:
        return []

    _HANDLERS = {b"B": _on_begin, b"C": _on_commit, b"M": _on_message, b"R": _on_relation,
                 b"T": _on_truncate, b"Y": _ignore, b"O": _ignore}
