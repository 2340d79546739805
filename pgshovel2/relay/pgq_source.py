"""PgQ source: a trigger set's queue, read batch by batch (:mod:`pgshovel2.relay.source`).

Unit: a batch, by its cur_tick_id (batch ids are not stable across retries: next_batch
draws them from a sequence); ordinal: the event's index in the batch (control events
count). Events come grouped by transaction, transactions in commit order; the last
Commit of a batch is complete, and the next batch is read only once the loop has
acknowledged it (``pgq.finish_batch``, after its Kafka commit): commit_delay is 0.

Without pgqd the source ticks its queue itself and runs PgQ's maintenance
(:mod:`pgshovel2.backends.pgq_ticker`).
"""

import logging
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

from pgshovel2.backends import pgq_ticker, trigger
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.codec.rows import loads_row
from pgshovel2.db import connect, outage
from pgshovel2.errors import FencedError, RelayError, UnavailableError
from pgshovel2.relay.pgq_ahead import ReadAhead
from pgshovel2.relay.pgq_runs import IUD, expand, expand_txns, run_end, txn_bounds
from pgshovel2.relay.prefetch import prefetch
from pgshovel2.relay.source import (
    CONTROL_OPS,
    Begin,
    Change,
    ChangeRun,
    Commit,
    Control,
    Idle,
    Item,
    Lag,
    TxnRun,
)
from pgshovel2.setrecord import TriggerCapture
from pgshovel2.wire import TRIGGER, Position, position_prefix

log = logging.getLogger(__name__)


def batch_gone(exc: psycopg2.Error) -> bool:
    """True when exc is PgQ's error for reading a batch that has been finished: pgq.batch_event_sql
    raises 'batch not found' when the batch was finished before the read began, and
    pgq.batch_event_tables 'Cannot find data for batch N' when it was finished between the two
    (each statement of a PL/pgSQL function sees the commits made before it starts)."""
    text = str(exc)
    return isinstance(exc, psycopg2.errors.RaiseException) and (
        "batch not found" in text or "Cannot find data for batch" in text)


@dataclass(frozen=True)
class Batch:
    """An open PgQ batch; from pgq.next_batch_info."""

    batch_id: int
    prev_tick_id: int
    cur_tick_id: int
    queued: int = 0  # events queued between its ticks (cur_tick_event_seq - prev_tick_event_seq)


# Events grouped by transaction, transactions in commit order: a transaction
# that waited for another's row lock inserted its events after the other's
# last one, so ordering transactions by their last ev_id keeps per-key order.
# {events} is the batch's own query from pgq.batch_event_sql, read directly:
# pgq.get_batch_events runs that same query in PL/pgSQL and returns it as a set,
# whose materialized copy cost as much again as the query (a drain's batch of
# 16,000 mixed rows: 66 ms read through it, 42 ms so).
_EVENTS_SQL = sql.SQL("""
SELECT ev_txid, (extract(epoch FROM ev_time) * 1000)::int8, ev_type, ev_data, ev_extra1, ev_extra2
FROM (SELECT e.*, max(ev_id) OVER (PARTITION BY ev_txid) AS tx_last FROM ({events}) e) e
WHERE {snapshot}::txid_snapshot IS NULL OR NOT txid_visible_in_snapshot(ev_txid, {snapshot}::txid_snapshot)
ORDER BY tx_last, ev_id
""")
# The events query sorts a whole batch twice (by txid for the window, then by tx_last); a merged
# batch of 20,000 mixed rows takes 8 MB per sort, which spilled to disk at the default 4 MB
# (190 ms -> 164 ms in memory). Session-wide on the relay's read connection only.
_READ_SETTINGS = "SET work_mem = '32MB'"
_ORDER_BY_ID = " order by 1"  # how pgq.batch_event_sql's query ends; the outer query orders


def events_query(batch_sql: str, snapshot: str | None, limit: int | None = None) -> sql.Composed:
    """The query of a batch's events (txid, ts_ms, ev_type, ev_data, ev_extra1, ev_extra2),
    grouped by transaction in commit order, skipping transactions visible in snapshot (a
    txid_snapshot's text, or None); the first limit rows only, unless None. batch_sql: the text
    pgq.batch_event_sql returned for the batch (PgQ's own selection of its events over the
    queue's event tables)."""
    if batch_sql.endswith(_ORDER_BY_ID):
        batch_sql = batch_sql[:-len(_ORDER_BY_ID)]
    query = _EVENTS_SQL.format(events=sql.SQL(batch_sql), snapshot=sql.Literal(snapshot))
    return query if limit is None else query + sql.SQL("LIMIT {}").format(sql.Literal(limit))


class PgqSource:
    """Reads a trigger set's queue as its relay consumer. dsn: libpq DSN of the set's database;
    poll_interval: seconds between polls when no tick is ahead; fetch_size: rows per fetch;
    maint_interval: seconds between runs of PgQ's maintenance (0: never, pgqd does it);
    raw_rows: changes carry their rows as the queue's JSON text for the native codec to read
    (rows.as_values reads it otherwise), else as lists.

    Raises UnavailableError when the database goes away (retrying is safe), RelayError when
    the queue or consumer is gone, FencedError when another relay acknowledged the batch.
    """

    backend = TRIGGER
    commit_delay = 0.0

    def __init__(self, dsn: str, capture: TriggerCapture, poll_interval: float = 0.02, fetch_size: int = 5000,
                 maint_interval: float = pgq_ticker.MAINT_INTERVAL, raw_rows: bool = False, runs: bool = False,
                 txn_runs: bool = True, read_ahead: bool = True):
        self.dsn, self.capture = dsn, capture
        self.read_ahead = read_ahead  # read the next batch while relaying this one (pgq_ahead)
        self.runs = runs and raw_rows  # a transaction's consecutive I/U/D rows come as ChangeRuns
        self.txn_runs = txn_runs and self.runs  # ... and small whole transactions as TxnRuns
        self.queue, self.consumer = capture.queue, capture.consumer
        self.poll_interval, self.fetch_size = poll_interval, fetch_size
        self.maint_interval, self.raw_rows = maint_interval, raw_rows
        self._next_maint = time.monotonic() + min(maint_interval, 5.0)
        self._ctl = connect(dsn, f"queue {self.queue}", UnavailableError)
        try:
            self._read = self._read_connection()
        except BaseException:
            self._ctl.close()
            raise
        self._ctl.autocommit = True
        self._ahead = ReadAhead(self._read, events_query, fetch_size)
        self._open: Batch | None = None
        self._behind = False  # the last poll saw ticks after its batch's

    def _read_connection(self):
        """The connection batches are read on, with _READ_SETTINGS for its session; raises
        UnavailableError when the database cannot be reached or goes away meanwhile."""
        conn = connect(self.dsn, f"queue {self.queue}", UnavailableError)
        try:
            with conn.cursor() as cur:
                cur.execute(_READ_SETTINGS)
            conn.commit()
        except psycopg2.Error as exc:
            conn.close()
            self._raise(exc)
        return conn

    def _query(self, query: str, params: tuple) -> tuple | None:
        """One row of query on the control connection; database outages become UnavailableError."""
        try:
            with self._ctl.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchone()
        except psycopg2.Error as exc:
            self._raise(exc)

    def _raise(self, exc: psycopg2.Error):
        """Raise exc as the source error it means (this is called inside its except block)."""
        err = self._error(exc)
        if err is exc:
            raise
        raise err from exc

    def _error(self, exc: psycopg2.Error) -> Exception:
        if outage(exc, self._ctl):
            return UnavailableError(f"queue {self.queue}: the database went away: {str(exc).strip()}")
        if isinstance(exc, (psycopg2.errors.UndefinedTable, psycopg2.errors.UndefinedFunction)) \
                or "Unknown queue" in str(exc) or "Not subscriber" in str(exc):
            return RelayError(f"queue {self.queue} or its consumer {self.consumer} is gone from the database "
                              f"(was the set dropped?): {str(exc).strip()}")
        return exc

    def last_tick(self) -> int:
        """The consumer's last finished tick id (pgq.get_consumer_info last_tick).

        Raises RelayError when the consumer is not registered on the queue.
        """
        row = self._query("SELECT last_tick FROM pgq.get_consumer_info(%s, %s)", (self.queue, self.consumer))
        if row is None:
            raise RelayError(f"consumer {self.consumer} is not registered on queue {self.queue}: "
                             "was the set dropped?")
        return int(row[0])

    def handoff(self, export: bool) -> tuple[Position, ExportedSnapshot | None, dict]:
        """The stream starts after the consumer's last finished tick; with export, filtered against
        the exported snapshot's txid snapshot (queued transactions visible in it are in the copy)."""
        tick = self.last_tick()
        if not export:
            return Position(tick, 0, True, None, TRIGGER), None, {"txid_snapshot": None, "skipped": True}
        snap = trigger.export(self.dsn, self.capture, UnavailableError)
        txids = snap.handoff_record["txid_snapshot"]
        return Position(tick, 0, True, txids, TRIGGER), snap, {"txid_snapshot": txids, "tick": tick}

    def switch(self, record) -> None:
        """Nothing to do: the queue's events carry their own layout."""

    def resume(self, position: Position) -> None:
        """Check the consumer is still registered (RelayError otherwise)."""
        self.last_tick()

    def items(self, position: Position) -> Iterator[Item]:
        """Batches after position; a batch position covers wholly comes as one complete Commit
        (it was committed to Kafka but not acknowledged before a restart)."""
        while True:
            self._maintain()
            row = self._poll()
            if row is None or row[0] is None:
                # a new tick means a batch is ready now
                if not (row and row[3] and self._tick()):
                    yield Idle(self.poll_interval)
                continue
            batch = self._open = Batch(*row[:3], row[4] or 0)
            if position.reaches(batch.cur_tick_id, 0, True):
                log.info("batch of ticks %d..%d is already in Kafka (committed before a restart): "
                         "acknowledging it", batch.prev_tick_id, batch.cur_tick_id)
                yield Commit(None, 0, batch.cur_tick_id, 0, True)
            else:
                if position.unit == batch.cur_tick_id:
                    log.info("resuming batch of ticks %d..%d after its first %d events (already in Kafka)",
                             batch.prev_tick_id, batch.cur_tick_id, position.ordinal)
                yield from self._batch(batch, position.txid_snapshot)
            while self._open is not None:  # the loop acknowledges the batch after its Kafka commit
                yield Idle(0.0)

    def _poll(self) -> tuple | None:
        """The poll's row (pgq_ticker.POLL_SQL); a batch over several ticks (POLL_MERGED_SQL) while
        the last poll found ticks after its batch's, and enough events queued."""
        margin, queue, consumer = pgq_ticker.TICK_MARGIN, self.queue, self.consumer
        row = None
        if self._behind:
            row = self._query(pgq_ticker.POLL_MERGED_SQL, (margin, queue, consumer, pgq_ticker.MERGE_COUNT, queue))
        if row is None or row[0] is None:
            row = self._query(pgq_ticker.POLL_SQL, (margin, queue, consumer, queue))
        self._behind = bool(row and row[5])
        return row

    def _tick(self) -> int | None:
        """Tick the queue (no ticker did for longer than its ticker_max_lag); the new tick id or None."""
        try:
            with self._ctl.cursor() as cur:
                return pgq_ticker.tick(cur, self.queue)
        except psycopg2.Error as exc:
            self._raise(exc)

    def _maintain(self) -> None:
        """PgQ's maintenance (rotation, vacuum, retry) when maint_interval has passed."""
        if not self.maint_interval or time.monotonic() < self._next_maint:
            return
        self._next_maint = time.monotonic() + self.maint_interval
        self._ahead.close()  # its read locks the event tables that rotation truncates: the loop would wait on itself
        try:
            with self._ctl.cursor() as cur:
                done = pgq_ticker.maintain(cur)
        except psycopg2.Error as exc:
            self._raise(exc)
        if done:
            log.info("PgQ maintenance: %s", ", ".join(done))

    def _batch(self, batch: Batch, snapshot: str | None) -> Iterator[Item]:
        """A batch's events as items, skipping transactions visible in snapshot (the handoff);
        with runs, a transaction's consecutive I/U/D rows of one ts_ms as ChangeRuns, and small whole
        transactions of such rows as TxnRuns (:func:`pgshovel2.relay.pgq_runs.txn_bounds`)."""
        loads, tick = loads_row, batch.cur_tick_id  # not json.loads: rows queued by older capture code have -0
        ordinal, current, last_ts = 0, None, 0
        prefix = position_prefix(TRIGGER, tick)
        rows = str if self.raw_rows else loads
        for chunk in self._event_chunks(batch, snapshot):
            i, n = 0, len(chunk)
            while i < n:
                txid, ts_ms, op, data, table, extra = chunk[i]
                if txid != current:
                    if current is not None:
                        yield Commit(current, last_ts, tick, ordinal, False)
                    txns = txn_bounds(chunk, i, ordinal, tick, prefix) if self.txn_runs else None
                    if txns:
                        end = txns[-1].stop
                        last_ts, current = txns[-1].ts_ms, None
                        yield TxnRun(chunk, txns, False, None, expand_txns)
                        ordinal, i = ordinal + end - i, end
                        continue
                    current = txid
                    yield Begin(txid, ts_ms, tick, ordinal)
                step = 1
                if op in CONTROL_OPS:
                    yield Control(txid, ts_ms, op, loads(data) if data else None, table,
                                  loads(extra) if extra else None, tick, ordinal)
                else:
                    last_ts = ts_ms
                    if self.runs and data and op in IUD:
                        step = run_end(chunk, i) - i
                        yield ChangeRun(txid, ts_ms, tick, ordinal, chunk[i:i + step], None, expand)
                    else:
                        yield Change(txid, ts_ms, op, rows(data) if data else None, table,
                                     rows(extra) if extra else None, tick, ordinal)
                ordinal += step
                i += step
        yield Commit(current, last_ts, tick, ordinal, True)

    def _event_chunks(self, batch: Batch, snapshot: str | None) -> Iterator[list[tuple]]:
        """Rows of a batch in chunks of at most fetch_size rows (:meth:`_chunks`), so memory stays
        bounded; a batch of more than fetch_size queued events fetched by a worker thread, two
        chunks ahead."""
        try:
            chunks = self._chunks(batch, snapshot)
            if batch.queued > self.fetch_size:  # fetch the next chunk while the loop relays one
                chunks = prefetch(chunks)
            with closing(chunks):
                yield from chunks
        except psycopg2.Error as exc:
            if batch_gone(exc):
                # Only the owner of the set's transactional id acknowledges batches (after a Kafka
                # commit), so another relay owns the set now: stop rather than fence it back.
                raise FencedError(f"batch {batch.batch_id} of queue {self.queue} was acknowledged by another "
                                  "relay of this set while this one read it: another relay took over; "
                                  "this one stops") from exc
            self._raise(exc)

    def _chunks(self, batch: Batch, snapshot: str | None) -> Iterator[list[tuple]]:
        """A batch's rows, read ahead (:mod:`pgshovel2.relay.pgq_ahead`) or read now
        (:meth:`_query_chunks`), in one transaction of the read connection; once they are all read
        and the relay is behind, the read of the next batch starts."""
        self._ahead.wait()
        try:
            with self._read.cursor() as cur:
                cur.execute("SELECT pgq.batch_event_sql(%s)", (batch.batch_id,))
                batch_sql = cur.fetchone()[0]
            chunks = self._ahead.take(batch.prev_tick_id, batch.cur_tick_id, batch_sql, snapshot)
            yield from chunks if chunks is not None else self._query_chunks(batch, batch_sql, snapshot)
        finally:
            try:
                self._read.rollback()
            except psycopg2.Error:  # the connection is gone: reported by the read that failed
                pass
        if self._behind and self.read_ahead:
            self._ahead.start(self.queue, self.consumer, batch.cur_tick_id, True, pgq_ticker.MERGE_COUNT, snapshot)

    def _query_chunks(self, batch: Batch, batch_sql: str, snapshot: str | None) -> Iterator[list[tuple]]:
        """A batch of up to fetch_size queued events in one query; a larger one (or one that turns
        out larger: transactions older than its first tick committed in it) through a server-side
        cursor, which costs the database three more statements."""
        if batch.queued <= self.fetch_size:
            with self._read.cursor() as cur:
                cur.execute(events_query(batch_sql, snapshot, self.fetch_size + 1))
                rows = cur.fetchall()
            if len(rows) <= self.fetch_size:
                yield rows
                return
        with self._read.cursor(name=f"batch_{batch.batch_id}") as cur:
            cur.execute(events_query(batch_sql, snapshot))  # no parameters: the batch's SQL is text
            while rows := cur.fetchmany(self.fetch_size):
                yield rows
                if len(rows) < self.fetch_size:
                    break

    def ack(self, position: Position) -> None:
        """Acknowledge the open batch (pgq.finish_batch) when position completes it: its events
        are never read again. A batch another relay of the set acknowledged first is only logged.
        It commits without waiting for the WAL flush (synchronous_commit off): a crash can only lose
        it, and the batch, read again, is covered by the position committed in Kafka."""
        batch = self._open
        if batch is None or not position.complete or position.unit < batch.cur_tick_id:
            return
        row = self._query(f"SELECT pgq.finish_batch(%s), {pgq_ticker.ASYNC_COMMIT}", (batch.batch_id,))
        if row is None or row[0] != 1:
            log.warning("batch %d of queue %s was already acknowledged by another relay of this set",
                        batch.batch_id, self.queue)
        self._open = None

    def wait(self, timeout: float) -> None:
        """Sleep timeout seconds (PgQ has nothing to wait on)."""
        if timeout > 0:
            time.sleep(timeout)

    def lag(self) -> Lag:
        """(seconds, events) the consumer is behind, from pgq.get_consumer_info."""
        row = self._query("SELECT extract(epoch FROM lag), pending_events FROM pgq.get_consumer_info(%s, %s)",
                          (self.queue, self.consumer))
        return Lag(float(row[0] or 0), int(row[1] or 0)) if row else Lag(0.0, 0)

    def describe(self) -> str:
        """``queue <name>``."""
        return f"queue {self.queue}"

    def close(self) -> None:
        """Close both connections (never raises)."""
        self._ahead.close()
        for conn in (self._ctl, self._read):
            try:
                conn.close()
            except psycopg2.Error:
                pass

