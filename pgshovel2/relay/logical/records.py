"""Our output plugin's records -> the relay's items (:class:`RecordDecoder`); no I/O.

The plugin (sql/decoder, record format in sql/decoder/README.rst) writes, per transaction
that touches the set's tables, a BEGIN record, one record per change (row images in the
capture trigger's value forms: JSON arrays) and a COMMIT record; plus heartbeat, layout (R)
and set-version (V) records. A transaction's records come in packs (P messages, at most about
128 KiB each, the last one ending with its COMMIT), which :class:`PackReader` opens into one
message per record. Unit: a transaction, by its commit LSN; ordinal: the change's index in it.
"""

import json
import struct
import time
from collections import deque
from collections.abc import Callable

from pgshovel2.codec import native
from pgshovel2.errors import RelayError
from pgshovel2.relay.logical import relation_layout
from pgshovel2.relay.logical.relation_layout import RelationLayout
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
from pgshovel2.setrecord import PLUGIN
from pgshovel2.wire import LOGICAL, Position, position_prefix

BEGIN_FIELDS = struct.Struct(">QQq")  # a BEGIN record's commit LSN, txid, commit time (µs since 2000)
COMMIT_FIELDS = struct.Struct(">QQI")  # a COMMIT record's commit LSN, end LSN, changes
_CHANGE = struct.Struct(">QHBI")  # change LSN, table index, flags, row length; the row at 16
_TRUNCATE = struct.Struct(">QH")
_LSN = struct.Struct(">Q")
RECORD_FORMAT = "5"  # the plugin's record format this module reads (its "format" option; 5: 4 + partitions)
PACK = 80  # P: a message holding records, each after its length (4 bytes)
_U32 = struct.Struct(">I")
_FLAG_OLD, _FLAG_NO_ROW, _FLAG_UNCHANGED = 1, 2, 4
_U16 = struct.Struct(">H")
_IUD = frozenset(b"IUD")


def unpack(pack: bytes) -> list[bytes]:
    """The records of a pack (a P message), in order. Raises RelayError when one is cut short."""
    records, pos, end, length = [], 1, len(pack), _U32.unpack_from
    while pos < end:
        start = pos + 4
        stop = start + length(pack, pos)[0] if start <= end else end + 1
        if stop > end:
            raise RelayError(f"a pack from output plugin {PLUGIN} ends inside a record ({end} bytes)")
        records.append(pack[start:stop])
        pos = stop
    return records


def records(message: bytes) -> list[bytes]:
    """The records of one message of the plugin: a pack's, or the message itself."""
    return unpack(message) if message[0] == PACK else [message]


def pack_reader(read_message: Callable[[], object | None]) -> "PackReader":
    """A reader of packs over read_message (:class:`PackReader`): the native module's twin when it
    is installed (pgshovel2.codec.native; it also has ``txn_scan``, :meth:`RecordDecoder.txn_scan`),
    else the Python one."""
    mod = native.module()
    if mod is None:
        return PackReader(read_message)
    return mod.PackReader(read_message, RelayError)


class Unpacked:
    """One record of a pack as a message: payload, the record; data_start, the pack's XLogData start."""

    __slots__ = ("payload", "data_start")

    def __init__(self, payload: bytes, data_start: int):
        self.payload, self.data_start = payload, data_start


class PackReader:
    """Reads a replication stream of our plugin one record at a time: read() gives the next
    message of read_message() (None: the stream holds nothing now), a pack opened into its
    records (:class:`Unpacked`) first."""

    def __init__(self, read_message: Callable[[], object | None]):
        self._read_message = read_message
        self._records: deque[Unpacked] = deque()

    def read(self) -> object | None:
        """The next record (a message, or an Unpacked of a pack), or None. Raises RelayError
        when a pack ends inside a record."""
        while not self._records:
            msg = self._read_message()
            if msg is None or msg.payload[0] != PACK:
                return msg
            start = msg.data_start
            self._records.extend(Unpacked(record, start) for record in unpack(msg.payload))
        return self._records.popleft()


def _parsed(row: bytes | list | None) -> list | None:
    """A row as a list whether the decoder keeps rows as text (raw_rows) or not."""
    return json.loads(row) if isinstance(row, bytes) else row


class RecordDecoder(RunMaker):
    """Turns the plugin's records into items (:meth:`decode`); no I/O.

    tags: table tags in the order of the plugin's ``tables`` option (a change names its
    table by index). subset_tags: tables captured with a column subset: like the capture
    trigger, an UPDATE that changes no captured column is dropped (known when the old row
    is logged: FULL). ends: (unit, LSN to confirm) of every transaction end and heartbeat
    decoded and not yet acknowledged. last_lsn: the end of the last transaction or heartbeat
    decoded (set it to the slot's confirmed position before streaming): Begin.last_lsn.
    skip_through: the committed position; a layout record in a unit it reaches fully is held
    and given (:class:`RelationLayout`) before the table's first change that counts.
    raw_rows: changes carry their rows as the plugin's JSON text (bytes) for the native codec
    to read, else as lists (json.loads).
    """

    def __init__(self, tags: list[str], slot: str = "(slot)", raw_rows: bool = False):
        self.tags, self.slot, self.raw_rows = tags, slot, raw_rows
        self.subset_tags: set[str] = set()
        self.ends: deque[tuple[int, int]] = deque()
        self.last_lsn: int | None = None
        self.skip_through: Position | None = None
        self._skip = False
        self._held: dict[str, RelationLayout] = {}
        self._unit = self._txid = self._ts_ms = self._ordinal = 0  # of the open transaction

    def feed(self, data: bytes, wal_start: int) -> list[Item]:
        """The items of one record (:meth:`decode`) or of a pack's records, as a list; a held layout
        before its table's change."""
        if data[0] == PACK:
            return [item for record in unpack(data) for item in self.feed(record, wal_start)]
        item = self.decode(data)
        if item is None:
            return []
        if self._held and type(item) is Change and item.table in self._held:
            return [self._held.pop(item.table).at(item.txid, item.ts_ms, item.unit, item.ordinal), item]
        return [item]

    def settle(self, layout: RelationLayout) -> None:
        """Nothing to do: the plugin's rows are in the layout it reported."""

    def lane_record(self, data: bytes, _lsn: int = 0) -> bytes | None:
        """The ChangeRun record of a record the native lane may take (data itself), or None: an
        I/U/D change without unchanged values of a table captured whole, while no layout is held."""
        if (data[0] in _IUD and not data[11] & _FLAG_UNCHANGED and not self._held
                and (not self.subset_tags or self.tags[_U16.unpack_from(data, 9)[0]] not in self.subset_tags)):
            return data
        return None

    def txn_run(self, msg, read: Callable[[], object | None], committed: int,
                may_read: Callable[[object], bool]) -> TxnReads:
        """The TxnReads (lane_reads) of our plugin's records, without an item per BEGIN and COMMIT (this
        runs per source transaction, and small transactions are most of some workloads): the
        whole transactions from msg, a BEGIN record whose commit LSN is above committed, that
        read() (a replication cursor's read_message) gives, every change of them one the lane may
        take (:meth:`lane_record`), RUN_MAX change records at most; may_read(commit) at each
        COMMIT message, whether the stream may be read on. The decoder's ``ends`` and
        ``last_lsn`` come out as if each record had been fed; a transaction the run cannot finish
        is fed from its BEGIN (``opening``; its changes read so far in ``partial``)."""
        records: list = []
        txns: list[TxnBounds] = []
        last = msg
        takes = self.lane_record if self._held or self.subset_tags else None
        ends, unpack_begin, unpack_commit = self.ends, BEGIN_FIELDS.unpack_from, COMMIT_FIELDS.unpack_from
        while msg is not None:
            begin = last = msg
            data = begin.payload
            if data[0] != BEGIN:
                break
            unit, txid, ts_us = unpack_begin(data, 1)
            if unit <= committed:
                break
            start = len(records)
            while (msg := read()) is not None:
                last, data = msg, msg.payload
                if (data[0] not in _IUD or data[11] & _FLAG_UNCHANGED or len(records) == RUN_MAX
                        or (takes is not None and takes(data) is None)):
                    break
                records.append(data)
            if msg is None or data[0] != COMMIT or len(records) == start:
                return self._unfinished(records, txns, start, begin, msg, last)
            _, end_lsn, _ = unpack_commit(data, 1)
            ts_us += PG_EPOCH_US
            txns.append(TxnBounds(start, len(records), txid, ts_us // 1000, ts_us, self.last_lsn,
                                  position_prefix(LOGICAL, unit), 0, unit))
            ends.append((unit, end_lsn))
            self.last_lsn = end_lsn
            msg = read() if may_read(msg) else None
        return self._whole(records, txns, msg, last)

    def txn_scan(self, reader, msg, committed: int, confirmed: int) -> TxnReads | None:
        """:meth:`txn_run` made by the native reader of packs (its ``txn_scan``, native/src/stream/scan.rs)
        over reader's records, without a Python object per BEGIN, COMMIT or pack record; None when
        it cannot stand for txn_run (a Python reader, or a layout held). confirmed: the slot's
        confirmed position; the stream is not read on after a COMMIT message that starts at or below
        it (txn_run's may_read: a keepalive read then could confirm what is not in Kafka,
        LogicalSource._keepalive_would_confirm_unrelayed)."""
        if self._held or not hasattr(reader, "txn_scan"):
            return None
        exclude = [i for i, tag in enumerate(self.tags) if tag in self.subset_tags] if self.subset_tags else []
        return self.scanned(reader.txn_scan(msg, committed, RUN_MAX, confirmed, self.last_lsn, exclude, TxnBounds))

    def _whole(self, records: list, txns: list[TxnBounds], msg, last) -> TxnReads:
        """What txn_run read when every transaction it read is whole: the run, the decoder's state
        that of the last transaction's end."""
        if txns:
            last_txn = txns[-1]
            self._unit, self._txid, self._ts_ms, self._ordinal = last_txn.unit, last_txn.txid, last_txn.ts_ms, 0
            self._skip = False
        return TxnReads(self.whole_txns(records, txns), [], [], msg, last)

    def _unfinished(self, records: list, txns: list[TxnBounds], start: int, begin, msg, last) -> TxnReads:
        """What txn_run read when the transaction at records[start:] (opened by begin, a BEGIN
        message) cannot be finished in the run: the run before it, the items of its BEGIN and its
        change records read so far."""
        partial = records[start:]
        del records[start:]
        opening = self.feed(begin.payload, begin.data_start)
        return TxnReads(self.whole_txns(records, txns), opening, partial, msg, last)

    def _expand(self, run: ChangeRun, start: int, stop: int) -> list[Change]:
        """ChangeRun.expand: the Changes of run.records[start:stop]."""
        out = []
        for i in range(start, stop):
            change = self._change(run.records[i], run.txid, run.ts_ms, run.unit, run.ordinal + i, run.tags)
            if change is not None:
                out.append(change)
        return out

    def _change(self, data: bytes, txid: int, ts_ms: int, unit: int, ordinal: int, tags: list[str]) -> Change | None:
        """The Change of an I/U/D record at (unit, ordinal); None when the capture trigger would
        write no event for it."""
        lsn, index, flags, size = _CHANGE.unpack_from(data, 1)
        end = 16 + size
        loads = bytes if self.raw_rows else json.loads
        row = None if flags & _FLAG_NO_ROW else loads(data[16:end])
        unchanged: tuple[int, ...] = ()
        if flags & _FLAG_UNCHANGED:
            (count,) = _U16.unpack_from(data, end)
            unchanged = struct.unpack_from(f">{count}H", data, end + 2)
            end += 2 + 2 * count
        before = loads(data[end:]) if flags & _FLAG_OLD else None
        table = tags[index]
        if before is not None and table in self.subset_tags and _parsed(before) == _parsed(row):
            return None  # no captured column changed (the trigger backend writes no event either)
        return Change(txid, ts_ms, chr(data[0]), row, table, before, unit, ordinal, lsn, unchanged)

    def decode(self, data: bytes) -> Item | None:
        """The item of one plugin record; None for a change the capture trigger would not write.

        Raises RelayError for an unknown record.
        """
        kind = data[0]
        if kind in b"IUD":
            ordinal = self._ordinal
            self._ordinal += 1
            return self._change(data, self._txid, self._ts_ms, self._unit, ordinal, self.tags)
        if kind == 66:  # B
            commit_lsn, txid, ts_us = BEGIN_FIELDS.unpack_from(data, 1)
            ts_us += PG_EPOCH_US
            self._unit, self._txid, self._ts_ms, self._ordinal = commit_lsn, txid, ts_us // 1000, 0
            self._skip = self.skip_through is not None and self.skip_through.reaches(commit_lsn, 0, True)
            return Begin(txid, self._ts_ms, commit_lsn, 0, ts_us, self.last_lsn)
        if kind == 67:  # C
            commit_lsn, end_lsn, _changes = COMMIT_FIELDS.unpack_from(data, 1)
            self.ends.append((commit_lsn, end_lsn))
            self.last_lsn = end_lsn
            return Commit(self._txid, self._ts_ms, commit_lsn, self._ordinal, True)
        if kind == 84:  # T
            lsn, index = _TRUNCATE.unpack_from(data, 1)
            ordinal = self._ordinal
            self._ordinal += 1
            return Change(self._txid, self._ts_ms, "T", None, self.tags[index], None, self._unit, ordinal, lsn)
        if kind == 72:  # H
            (lsn,) = _LSN.unpack_from(data, 1)
            self.ends.append((lsn, lsn))
            self.last_lsn = lsn
            return Commit(None, int(time.time() * 1000), lsn, 0, True)
        if kind == 82:  # R
            layout = relation_layout.parse_record(data, self.tags)
            if self._skip:
                self._held[layout.tag] = layout
                return None
            self._held.pop(layout.tag, None)
            return layout.at(self._txid, self._ts_ms, self._unit, self._ordinal)
        if kind == 86:  # V
            content = json.loads(data[9:])
            return Control(self._txid, self._ts_ms, SET_VERSION, content, "", None, self._unit, self._ordinal)
        raise RelayError(f"unknown record {data[:1]!r} from output plugin {PLUGIN} on slot {self.slot}")
