"""Logical source: a set's replication slot, read through our output plugin.

The plugin (sql/decoder, record format in sql/decoder/README.rst) writes, per
transaction that touches the set's tables, a BEGIN record, one record per
change (row images in the capture trigger's value forms: JSON arrays) and a
COMMIT record; plus heartbeat records. :meth:`LogicalSource.read` turns them
into :class:`Begin`, :class:`~pgshovel2.relay.pgq_source.Event`,
:class:`Commit` and :class:`Heartbeat` values.

LSNs are ints (``pg_lsn`` as a 64-bit number). The slot is confirmed
(standby feedback, :meth:`LogicalSource.confirm`) only by the caller, after
the Kafka commit.
"""

import json
import logging
import select
import struct
import time
from typing import NamedTuple

import psycopg2
import psycopg2.extras

from pgshovel2.catalog import Table
from pgshovel2.db import connect
from pgshovel2.errors import RelayError, UnavailableError
from pgshovel2.relay.pgq_source import Event

log = logging.getLogger(__name__)

PLUGIN = "pgshovel2_decoder"
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since the Unix epoch
_BEGIN = struct.Struct(">QQq")
_COMMIT = struct.Struct(">QQI")
_CHANGE = struct.Struct(">QHBI")  # change LSN, table index, flags, row length; the row at 16
_TRUNCATE = struct.Struct(">QH")
_LSN = struct.Struct(">Q")
RECORD_FORMAT = "2"  # the plugin's record format this module reads (its "format" option)
_FLAG_OLD, _FLAG_NO_ROW = 1, 2


class Begin(NamedTuple):
    """A transaction's start. commit_lsn: LSN of its commit record; txid: epoch-qualified
    64-bit xid (as txid_current()); ts_ms, ts_us: commit time, ms / µs since the Unix epoch;
    last_lsn: the LSN up to which the stream was completely processed before this transaction
    (the end of the previous transaction or heartbeat the plugin wrote, else the slot's
    confirmed position when streaming started; Debezium's "last committed LSN")."""

    commit_lsn: int
    txid: int
    ts_ms: int
    ts_us: int | None = None
    last_lsn: int | None = None


class Commit(NamedTuple):
    """A transaction's end. end_lsn: the LSN just after its commit record (what the slot is
    confirmed to once it is in Kafka); changes: change records the plugin wrote for it."""

    commit_lsn: int
    end_lsn: int
    changes: int


class Heartbeat(NamedTuple):
    """A heartbeat message at lsn: everything before it was sent."""

    lsn: int


def lsn_text(lsn: int) -> str:
    """``pg_lsn`` text form of an LSN int."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    """An LSN int from ``pg_lsn`` text (``16/B374D848``)."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class LogicalSource:
    """A set's slot on its database (dsn), for tables (the set's, in record order).

    Raises UnavailableError when the database cannot be reached.
    """

    def __init__(self, dsn: str, slot: str, tables: tuple[Table, ...]):
        self.dsn, self.slot = dsn, slot
        self._tags = [t.qualified for t in tables]
        self._tables = tables
        self._ctl = connect(dsn, f"slot {slot}", UnavailableError)
        self._ctl.autocommit = True
        try:
            self._repl = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        except psycopg2.OperationalError as exc:
            self._ctl.close()
            raise UnavailableError(f"cannot open a replication connection for slot {slot}: "
                                   f"{str(exc).strip()}") from exc
        self._cur = self._repl.cursor()
        self._txid = self._ts_ms = 0
        self._last_lsn: int | None = None  # Begin.last_lsn of the next transaction
        # tags of tables captured with a column subset: like the capture trigger, the relay skips
        # their UPDATEs that change no captured column (known when the old row is logged: FULL)
        self.subset_tags: set[str] = set()

    def slot_exists(self) -> bool:
        """True when the set's slot exists on the server."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            return cur.fetchone() is not None

    def create_slot(self, export: bool) -> tuple[int, str | None]:
        """Create the slot; (consistent point LSN, exported snapshot name or None).

        With export, the snapshot stays usable (``SET TRANSACTION SNAPSHOT``) until
        :meth:`start`. Raises RelayError when the plugin cannot be loaded.
        """
        mode = "EXPORT_SNAPSHOT" if export else "NOEXPORT_SNAPSHOT"
        try:
            self._cur.execute(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL {PLUGIN} {mode}')
        except psycopg2.Error as exc:
            hint = ""
            if PLUGIN in str(exc):  # not installed, or not allowed by output_plugin_libraries
                hint = f" (is sql/decoder installed and {PLUGIN} in the server's output_plugin_libraries?)"
            raise RelayError(f"cannot create replication slot {self.slot} with output plugin {PLUGIN}: "
                             f"{str(exc).strip()}{hint}") from exc
        _name, consistent, snapshot, _plugin = self._cur.fetchone()
        log.info("created replication slot %s at %s", self.slot, consistent)
        return lsn_int(consistent), snapshot

    def drop_slot(self) -> None:
        """Drop the set's slot if it exists (before creating it anew)."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s", (self.slot,))
            if cur.rowcount:
                log.info("dropped replication slot %s", self.slot)

    def tables_option(self) -> str:
        """The plugin's ``tables`` option: ``oid:attnum,...;...`` in set order.

        Also fills :attr:`subset_tags`. Raises RelayError when a table of the set no
        longer exists.
        """
        parts = []
        with self._ctl.cursor() as cur:
            for table in self._tables:
                cur.execute("SELECT c.oid, (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid "
                            "AND a.attnum > 0 AND NOT a.attisdropped) FROM pg_class c "
                            "WHERE c.oid = to_regclass(%s)", (table.qualified,))
                row = cur.fetchone()
                if row is None:
                    raise RelayError(f"table {table.qualified} of the set does not exist any more")
                oid, live = row
                if len(table.columns) < live:
                    self.subset_tags.add(table.qualified)
                parts.append(f"{oid}:{','.join(str(c.attnum) for c in table.columns)}")
        return ";".join(parts)

    def start(self) -> None:
        """Start streaming from the slot's confirmed position.

        Raises RelayError when the slot does not exist (dropped, or lost in a failover:
        PostgreSQL 15 does not copy slots to standbys).
        """
        options = {"format": RECORD_FORMAT, "tables": self.tables_option()}
        with self._ctl.cursor() as cur:
            cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                        (self.slot,))
            row = cur.fetchone()
        self._last_lsn = lsn_int(row[0]) if row and row[0] else None
        try:
            self._cur.start_replication(slot_name=self.slot, decode=False, options=options, status_interval=5)
        except psycopg2.errors.UndefinedObject as exc:
            raise RelayError(missing_slot_message(self.slot)) from exc

    def read(self) -> Begin | Event | Commit | Heartbeat | None:
        """The next record, or None when none is buffered (then :meth:`wait`)."""
        msg = self._cur.read_message()
        if msg is None:
            return None
        return self._decode(msg.payload)

    def _decode(self, data: bytes) -> Begin | Event | Commit | Heartbeat:
        kind = data[0]
        if kind in b"IUD":
            lsn, index, flags, size = _CHANGE.unpack_from(data, 1)
            end = 16 + size
            if flags & _FLAG_NO_ROW:
                row = None
            else:
                row = json.loads(data[16:end])
            before = json.loads(data[end:]) if flags & _FLAG_OLD else None
            return Event(self._txid, self._ts_ms, chr(kind), row, self._tags[index], before, lsn)
        if kind == 66:  # B
            commit_lsn, txid, ts_us = _BEGIN.unpack_from(data, 1)
            ts_us += PG_EPOCH_US
            self._txid, self._ts_ms = txid, ts_us // 1000
            return Begin(commit_lsn, txid, self._ts_ms, ts_us, self._last_lsn)
        if kind == 67:  # C
            commit = Commit(*_COMMIT.unpack_from(data, 1))
            self._last_lsn = commit.end_lsn
            return commit
        if kind == 84:  # T
            lsn, index = _TRUNCATE.unpack_from(data, 1)
            return Event(self._txid, self._ts_ms, "T", None, self._tags[index], None, lsn)
        if kind == 72:  # H
            beat = Heartbeat(*_LSN.unpack_from(data, 1))
            self._last_lsn = beat.lsn
            return beat
        raise RelayError(f"unknown record {data[:1]!r} from output plugin {PLUGIN} on slot {self.slot}")

    def wait(self, timeout: float) -> None:
        """Block until the server sends something or timeout (s) passes."""
        select.select([self._cur], [], [], timeout)

    def confirm(self, lsn: int) -> None:
        """Tell the server everything before lsn is safe (in Kafka): the slot may release it."""
        self._cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)

    def heartbeat(self) -> int:
        """Emit a heartbeat message into the WAL; returns its LSN."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(false, 'pgshovel2.heartbeat', %s)::text", (self.slot,))
            return lsn_int(cur.fetchone()[0])

    def lag(self) -> tuple[int, int]:
        """(WAL bytes written since the confirmed position, WAL bytes the slot retains)."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8, "
                        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 "
                        "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            row = cur.fetchone()
        return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)

    def close(self) -> None:
        """Close both connections."""
        for conn in (self._repl, self._ctl):
            try:
                conn.close()
            except psycopg2.Error:
                pass


def missing_slot_message(slot: str) -> str:
    """What to do when a set's slot is gone but Kafka holds a position of it."""
    return (f"replication slot {slot} does not exist, but Kafka holds a position of it: it was dropped, or "
            "lost in a failover (PostgreSQL 15 does not copy slots to standbys). The relay will not guess "
            "where to resume. Re-bootstrap the set: run the relay once with --snapshot (it creates the slot "
            "and takes a new initial snapshot, op=r messages, then streams from the new slot)")


def wait_caught_up(dsn: str, slot: str, timeout: float = 120.0) -> int:
    """Wait until the relay of slot has confirmed everything committed before the call.

    Emits a heartbeat and waits until the slot's confirmed_flush_lsn reaches it (the
    relay confirms a heartbeat only once everything before it is in Kafka). Returns the
    heartbeat's LSN; raises RelayError after timeout seconds.
    """
    conn = connect(dsn, f"slot {slot}", RelayError)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(false, 'pgshovel2.heartbeat', %s)", (slot,))
            target = cur.fetchone()[0]
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                            "WHERE slot_name = %s", (target, slot))
                row = cur.fetchone()
                if row and row[0]:
                    return lsn_int(target)
                if time.monotonic() > deadline:
                    raise RelayError(f"slot {slot} did not confirm {target} within {timeout:g}s: "
                                     "is the relay running?")
                time.sleep(0.05)
    finally:
        conn.close()
