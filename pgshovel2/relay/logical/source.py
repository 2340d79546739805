"""Logical source: a logical set's replication slot, read through our output plugin or
through PostgreSQL's ``pgoutput`` (:mod:`pgshovel2.relay.logical.records`,
:mod:`pgshovel2.relay.logical.pgoutput.decoder` with :mod:`pgshovel2.relay.logical.pgoutput.stream`: the same
items, :mod:`pgshovel2.relay.source`).

Unit: a transaction, by its commit LSN; ordinal: the change's index in it. A heartbeat is
a Commit without transaction at the heartbeat's LSN. Several transactions may share one
Kafka transaction (commit_delay 10 ms); the slot is confirmed (standby feedback, the end
of the last transaction in Kafka) only by :meth:`LogicalSource.ack`, after the commit.
"""

import logging
import select
import time
from collections.abc import Callable, Iterable, Iterator

import psycopg2

from pgshovel2.backends import logical, pgoutput
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.catalog import Table
from pgshovel2.db import connect, outage
from pgshovel2.errors import RelayError, UnavailableError
from pgshovel2.relay.logical import runs as logical_runs
from pgshovel2.relay.logical.feedback import FeedbackKeeper
from pgshovel2.relay.logical.pgoutput import stream as pgoutput_stream
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder
from pgshovel2.relay.logical.pgoutput.stream import StreamAssembler
from pgshovel2.relay.logical.records import RECORD_FORMAT, RecordDecoder, pack_reader
from pgshovel2.relay.logical.relation_layout import Redo, RelationLayout
from pgshovel2.relay.logical.stream_reader import stream_reader
from pgshovel2.relay.logical.tables import LogicalTables
from pgshovel2.relay.source import Begin, Change, Commit, Idle, Item, Lag
from pgshovel2.setrecord import PLUGIN, SetRecord
from pgshovel2.wire import LOGICAL, Lsn, Position

log = logging.getLogger(__name__)

# s from a transaction's end to its Kafka commit while changes keep coming (pgshovel2.relay.commit_clock):
# each Kafka transaction costs the broker about 3 ms of CPU whatever its size (docs/internals.rst)
COMMIT_DELAY = 0.01


class LogicalSource:
    """A set's slot on its database (dsn), for tables (the set's, in record order), read
    through plugin (``pgshovel2_decoder`` or ``pgoutput``).

    heartbeat_interval: seconds without data before a heartbeat message lets the slot advance;
    wait_cap: longest single wait (s). pgoutput only: spill_dir, where streamed transactions are
    spilled (:mod:`pgshovel2.relay.logical.pgoutput.stream`; None: the system's temp dir);
    decoding_work_mem: the walsender's logical_decoding_work_mem (e.g. ``64kB``; None: the
    server's), above which a transaction is streamed before its commit. raw_rows: rows stay the
    plugin's JSON text (for the native codec); runs: consecutive change messages come as ChangeRuns
    (the native lane; with raw_rows only; pgoutput: outside streamed transactions); txn_runs: with
    runs, whole small transactions the stream holds come as TxnRuns. commit_delay: seconds from a
    transaction's end to its Kafka commit while changes keep coming (None: COMMIT_DELAY; the
    relay's ``--commit-delay``). Raises UnavailableError
    when the database cannot be reached or goes away (retrying is safe), RelayError when the slot
    is gone.
    """

    backend = LOGICAL
    commit_delay = COMMIT_DELAY
    scans = True  # TxnRuns by the decoder's native txn_scan where it has one (else its txn_run)

    def __init__(self, dsn: str, slot: str, tables: tuple[Table, ...], heartbeat_interval: float = 10.0,
                 wait_cap: float = 0.5, plugin: str = PLUGIN, mode_all: frozenset[str] = frozenset(),
                 spill_dir: str | None = None, decoding_work_mem: str | None = None, raw_rows: bool = False,
                 runs: bool = False, txn_runs: bool = True, commit_delay: float | None = None,
                 publication: str | None = None):
        self.dsn, self.slot, self.plugin, self.spill_dir = dsn, slot, plugin, spill_dir
        self.publication = publication or pgoutput.publication_name(slot)  # pgoutput: what the slot sends
        if commit_delay is not None:
            self.commit_delay = commit_delay
        self.heartbeat_interval, self.wait_cap = heartbeat_interval, wait_cap
        self._ctl = connect(dsn, f"slot {slot}", UnavailableError)
        self._ctl.autocommit = True
        self.tables = LogicalTables(self._ctl, slot, self._sql, tables, mode_all)
        try:
            self._repl = logical.replication_connection(dsn, f"slot {slot}", UnavailableError, plugin,
                                                        decoding_work_mem)
        except BaseException:
            self._ctl.close()
            raise
        self._cur = self._repl.cursor()
        self._keeper = FeedbackKeeper(self._cur)  # no keepalive mid-transaction (relay/logical/feedback.py)
        self._decoder: RecordDecoder | PgoutputDecoder = RecordDecoder(self.tables.tags, slot, raw_rows)
        self.runs = runs and raw_rows  # ChangeRuns of change messages (the decoder's lane_record)
        self.txn_runs = self.runs and txn_runs  # ... and small whole transactions as TxnRuns
        self.stream: StreamAssembler | None = None  # pgoutput's streamed transactions
        self._in_txn = False  # between a Begin and its Commit
        self._last_start: int | None = None  # XLogData start of the last message read
        self._flushed = 0  # the highest position confirmed
        self._read_message: Callable[[], object | None] = self._cur.read_message
        self._reader = None  # our plugin's reader of packs (record_decoder.pack_reader)

    def _sql(self, query: str, params: tuple) -> tuple | None:
        try:
            with self._ctl.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchone() if cur.description else None
        except psycopg2.Error as exc:
            if outage(exc, self._ctl):
                raise UnavailableError(f"slot {self.slot}: the database went away: {str(exc).strip()}") from exc
            raise

    def handoff(self, export: bool) -> tuple[Position, ExportedSnapshot | None, dict]:
        """Create the slot anew (nothing of an old one is in Kafka, or a re-snapshot was asked for);
        the stream starts at its consistent point, with export in the snapshot it exported."""
        self._sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                  (self.slot,))
        if export:
            snap = logical.export(self.dsn, UnavailableError, slot=self.slot, plugin=self.plugin)
            lsn, snap_record = snap.handoff.lsn, {"slot": self.slot, "lsn": snap.handoff_record["lsn"]}
        else:
            snap = None
            lsn, _ = logical.create_slot(self._repl, self.slot, export=False, plugin=self.plugin)
            snap_record = {"slot": self.slot, "skipped": True, "lsn": str(Lsn(lsn))}
            log.info("skipping the initial snapshot: relaying changes from the slot's consistent point %s", Lsn(lsn))
        return Position.at_consistent_point(lsn), snap, snap_record

    def resume(self, position: Position) -> None:
        """Raise RelayError when the slot is gone (Kafka holds a position of it: no guessing)."""
        if self._sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)) is None:
            raise RelayError(logical.missing_slot_message(self.slot))
        log.info("resuming slot %s after %s", self.slot, position.describe())

    def pgoutput_options(self) -> dict[str, str]:
        """pgoutput's options: the highest protocol version the server speaks, with streaming of
        large in-progress transactions from 2 on (PostgreSQL 14+); makes the decoder from the
        catalog's column types and the assembler of streamed transactions.
        Raises RelayError when a table or captured column of the set no longer exists."""
        decoder = self.tables.pgoutput_decoder(others=self.publication != pgoutput.publication_name(self.slot))
        decoder.set_xid_reference(self._sql("SELECT txid_snapshot_xmax(txid_current_snapshot())", ())[0])
        self._decoder = decoder
        version = pgoutput_stream.protocol_version(self._repl.server_version)
        options = {"proto_version": str(version), "publication_names": self.publication}
        if version >= 2:
            options.update(messages="true", streaming="on")
            self.stream = pgoutput_stream.StreamAssembler(self.spill_dir, self.slot)
        return options

    def switch(self, record: SetRecord) -> None:
        """The set version in effect from the next item on (the loop calls it at every switch and
        before streaming): LogicalTables.switch with the decoder now."""
        self.tables.switch(record, self._decoder)

    def _messages(self, msg) -> Iterable[tuple[bytes, int]]:
        """The (message, WAL start) pairs a received message gives the decoder."""
        if self.stream is None:
            return ((msg.payload, msg.data_start),)
        return self.stream.route(msg.payload, msg.data_start)

    def items(self, position: Position) -> Iterator[Item]:
        """Stream from the slot's confirmed position (PostgreSQL sends from there; what position
        covers comes again and is skipped by the loop). Heartbeats when idle outside a transaction."""
        if self.plugin == pgoutput.NAME:
            options = self.pgoutput_options()
        else:
            options = {"format": RECORD_FORMAT, "tables": self.tables.tables_option(self._decoder)}
        row = self._sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
        self._decoder.last_lsn = Lsn.parse(row[0]) if row and row[0] else None
        self._decoder.skip_through = position
        try:
            self._cur.start_replication(slot_name=self.slot, decode=False, options=options, status_interval=5)
        except psycopg2.errors.UndefinedObject as exc:
            raise RelayError(logical.missing_slot_message(self.slot)) from exc
        except psycopg2.Error as exc:
            self._reraise(exc)
        self._in_txn, idle_since = False, time.monotonic()
        if self.stream is not None:
            self.stream.reset()
        read = stream_reader(self._repl, self._cur)  # the native reader where there is one
        if self.plugin != pgoutput.NAME:  # our plugin's records come in packs (record format 4)
            self._reader = pack_reader(read)
            self._read_message = self._reader.read
        else:
            self._read_message = read
        self._keeper.start()
        try:
            yield from self._read(position, idle_since)
        finally:
            self._keeper.stop()

    def _read(self, position: Position, idle_since: float) -> Iterator[Item]:
        while True:
            if self._keepalive_would_confirm_unrelayed():
                yield Idle(self.commit_delay)  # the loop commits what is ready and acknowledges it first
                continue
            try:
                msg = self._read_message()
            except psycopg2.Error as exc:
                self._reraise(exc)
            if msg is None:
                if not self._in_txn and time.monotonic() - idle_since >= self.heartbeat_interval:
                    self._sql("SELECT pg_logical_emit_message(false, 'pgshovel2.heartbeat', %s)", (self.slot,))
                    idle_since = time.monotonic()
                yield Idle(self.wait_cap)
                continue
            while msg is not None:
                self._last_start = msg.data_start
                if self.txn_runs and msg.payload[0] == logical_runs.BEGIN and self._may_start_run(msg, position):
                    reads = self._txn_reads(msg, position.unit)
                    if reads.run is not None:
                        yield reads.run
                    if reads.opening:
                        yield from self._decoded(reads.opening, position)
                    if reads.partial:
                        yield self._decoder.run(reads.partial)
                    msg = reads.next
                    continue
                record = self._lane_record(msg)
                if record is not None:
                    records, msg = logical_runs.change_run(record, self._read_one, self._decoder)
                    opening = self._decoder.opening()
                    if opening:
                        yield from self._decoded(opening, position)
                    yield self._decoder.run(records)
                    continue
                for data, lsn in self._messages(msg):
                    items = self._decoder.feed(data, lsn)
                    if len(items) == 1 and type(items[0]) is Change:
                        yield items[0]  # the usual message: no generator made for it (this runs per change)
                    else:
                        yield from self._decoded(items, position)
                msg = None
            if not self._in_txn:
                idle_since = time.monotonic()

    def _lane_record(self, msg) -> object | None:
        """The decoder's ChangeRun record of a received message the native lane may take, or None
        (no runs, or pgoutput inside a streamed transaction's block: that goes to its spill file)."""
        if not self.runs or (self.stream is not None and self.stream.in_block):
            return None
        return self._decoder.lane_record(msg.payload, msg.data_start)

    def _txn_reads(self, msg, committed: int) -> logical_runs.TxnReads:
        """The decoder's txn_run from msg, a BEGIN: whole small transactions for a TxnRun."""
        decoder = self._decoder
        try:
            reads = decoder.txn_scan(self._reader or self._read_message, msg, committed, self._flushed) \
                if self.scans else None
            if reads is None:
                reads = decoder.txn_run(msg, self._read_message, committed, self._may_read)
        except psycopg2.Error as exc:
            self._reraise(exc)
        self._last_start = reads.last.data_start
        return reads

    def _read_one(self) -> object | None:
        """The next message the stream holds (None: none now), its start kept as _last_start."""
        try:
            msg = self._read_message()
        except psycopg2.Error as exc:
            self._reraise(exc)
        if msg is not None:
            self._last_start = msg.data_start
        return msg

    def _may_start_run(self, msg, position: Position) -> bool:
        """Whether a TxnRun may start at msg, a BEGIN: outside pgoutput's stream blocks, of a
        transaction the committed position does not reach (that one goes the old way: skipped)."""
        return ((self.stream is None or not self.stream.in_block)
                and logical_runs.commit_lsn(msg.payload) > position.unit)

    def _may_read(self, commit) -> bool:
        """Whether the stream may be read after commit, the message that ended a transaction of a run."""
        self._last_start = commit.data_start
        return not self._keepalive_would_confirm_unrelayed()

    def _keepalive_would_confirm_unrelayed(self) -> bool:
        """True when a keepalive read now could confirm a transaction not yet in Kafka: psycopg2
        moves the flush position to a keepalive's WAL end once the confirmed position reaches the
        start LSN of the last message read. Starts are not monotonic when transactions interleave
        (a Begin carries its transaction's first LSN, a Stream Stop its last streamed change's),
        so a received, unacknowledged transaction (decoder.ends) may lie below that WAL end."""
        return (not self._in_txn and bool(self._decoder.ends) and self._last_start is not None
                and self._last_start <= self._flushed)

    def _decoded(self, items: list[Item], position: Position) -> Iterator[Item]:
        """The items of one message (decoder.feed's); layouts are settled (a schema-change Control when new)."""
        for item in items:
            kind = type(item)
            if kind is RelationLayout:
                control = self.tables.layout(item)
                if control is not None:
                    yield control  # the loop switches (and calls switch()) before this goes on
                elif isinstance(self._decoder, PgoutputDecoder):
                    self.tables.in_effect(item.tag, self._decoder)
                self._decoder.settle(item)
                continue
            if kind is Redo:
                yield from self._decoder.feed(item.data, item.lsn)
                continue
            if kind is Begin:
                self._in_txn = True
                if item.unit == position.unit and not position.complete:
                    log.info("resuming transaction %d (commit LSN %s) after its first %d changes (already "
                             "in Kafka)", item.txid, Lsn(item.unit), position.ordinal)
            elif kind is Commit:
                self._in_txn = False
            yield item

    def _reraise(self, exc: psycopg2.Error):
        """Raise a replication-connection error as UnavailableError: any failure of the stream is
        an outage to retry from the committed position, whatever libpq says about it."""
        detail = str(exc).strip() or type(exc).__name__
        raise UnavailableError(f"replication stream of slot {self.slot} broke: {detail}") from exc

    def ack(self, position: Position) -> None:
        """Confirm the slot up to the end of the last transaction (or heartbeat) position covers."""
        confirm, ends = None, self._decoder.ends
        while ends and ends[0][0] <= position.unit:
            confirm = ends.popleft()[1]
        if confirm is not None:
            try:
                self._cur.send_feedback(write_lsn=confirm, flush_lsn=confirm, force=True)
            except psycopg2.Error as exc:
                self._reraise(exc)
            self._flushed = max(self._flushed, confirm)

    def wait(self, timeout: float) -> None:
        """Block until the server sends something or timeout (s) passes (sleep while the stream
        must not be read: :meth:`_keepalive_would_confirm_unrelayed`)."""
        if self._keepalive_would_confirm_unrelayed():
            time.sleep(min(timeout, self.wait_cap))
        else:
            select.select([self._cur], [], [], min(timeout, self.wait_cap))

    def lag(self) -> Lag:
        """WAL bytes written since the confirmed position, and WAL bytes the slot retains."""
        row = self._sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8, "
                        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 "
                        "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
        return Lag(bytes=int(row[0] or 0), retained_bytes=int(row[1] or 0)) if row else Lag(bytes=0, retained_bytes=0)

    def describe(self) -> str:
        """``slot <name>``."""
        return f"slot {self.slot}"

    def close(self) -> None:
        """Close both connections (never raises)."""
        self._keeper.stop()
        for conn in (self._repl, self._ctl):
            try:
                conn.close()
            except psycopg2.Error:
                pass
