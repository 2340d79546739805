"""PgQ source: a trigger set's queue, read batch by batch (:mod:`pgshovel2.relay.source`).

Unit: a batch, by its cur_tick_id (batch ids are not stable across retries: next_batch
draws them from a sequence); ordinal: the event's index in the batch (control events
count). Events come grouped by transaction, transactions in commit order; the last
Commit of a batch is complete, and the next batch is read only once the loop has
acknowledged it (``pgq.finish_batch``, after its Kafka commit): commit_delay is 0.

Without pgqd the source ticks its queue itself and runs PgQ's maintenance
(:mod:`pgshovel2.backends.pgq_ticker`). A relay that keeps up polls only when the queue's
next tick is due (each poll says when), and then ticks and opens that tick's batch in one
round trip; a batch of up to fetch_size events is read in one more, on the same autocommit
connection, and acknowledged in a third.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import closing

import psycopg2
import psycopg2.errors

from pgshovel2.backends import pgq_ticker, trigger
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.codec.rows import loads_row
from pgshovel2.db import connect, outage
from pgshovel2.errors import FencedError, RelayError, UnavailableError
from pgshovel2.relay.pgq.ahead import ReadAhead
from pgshovel2.relay.pgq.batch import READ_SETTINGS, Batch, Poll, batch_gone, events_query
from pgshovel2.relay.pgq.prefetch import prefetch
from pgshovel2.relay.pgq.runs import IUD, expand, expand_txns, run_end, txn_bounds
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
        self._last: Poll | None = None  # what the last poll found (None: no poll yet)
        self._tick_at = 0.0  # time.monotonic() when the queue's next tick is due: poll then
        self._in_kafka: int | None = None  # the last tick whose batch is whole in Kafka (positions given)

    def _read_connection(self):
        """The connection large batches are read on (a server-side cursor, in a transaction), with
        READ_SETTINGS for its session, as the control connection's; raises UnavailableError when
        the database cannot be reached or goes away meanwhile."""
        conn = connect(self.dsn, f"queue {self.queue}", UnavailableError)
        try:
            for each in (conn, self._ctl):
                with each.cursor() as cur:
                    cur.execute(READ_SETTINGS)
                each.commit()
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

    def _raise(self, exc: psycopg2.Error, batch: Batch | None = None):
        """Raise exc, from a statement on batch (None: not known, e.g. the poll that opens one), as
        the source error it means (this is called inside its except block)."""
        err = self._error(exc, batch)
        if err is exc:
            raise
        raise err from exc

    def _error(self, exc: psycopg2.Error, batch: Batch | None) -> Exception:
        if batch_gone(exc):
            # Only the owner of the set's transactional id acknowledges batches (after a Kafka
            # commit), so another relay owns the set now: stop rather than fence it back. The poll
            # meets it too: it opens the batch and reads pgq.batch_event_sql in one statement.
            which = f"batch {batch.batch_id}" if batch else f"the batch it opened ({str(exc).splitlines()[0]})"
            return FencedError(f"{which} of queue {self.queue} was acknowledged by another relay of this set "
                               "while this one read it: another relay took over; this one stops")
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
        if position.complete:
            self._in_kafka = position.unit
        while True:
            self._maintain()
            tick = time.monotonic() >= self._tick_at
            if self._last is not None and not (tick or self._behind()):
                yield Idle(max(0.0, min(self.poll_interval, self._tick_at - time.monotonic())))
                continue
            poll = self._poll(tick)
            batch = self._open = poll.batch
            if batch is None or self._moved_past_kafka(batch):
                continue
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

    def _poll(self, tick: bool) -> Poll:
        """Poll (pgq_ticker.POLL_SQL), ticking first when tick (TICK_POLL_SQL); a batch over several
        ticks (POLL_MERGED_SQL) while the last poll found ticks after its batch's, and enough events
        queued. Sets when to poll next: when the next tick is due, or a poll_interval after a tick
        that found nothing to tick."""
        margin, queue, consumer = pgq_ticker.TICK_MARGIN, self.queue, self.consumer
        lock = pgq_ticker.poll_lock(queue, consumer)
        poll = None
        if self._behind():
            poll = Poll.of(self._query(pgq_ticker.POLL_MERGED_SQL,
                                       (*lock, margin, queue, consumer, pgq_ticker.MERGE_COUNT, queue)))
        if poll is None or poll.batch is None:
            if tick:
                args = (*lock, pgq_ticker.tick_name(queue), queue, margin, queue, consumer, queue)
                poll = Poll.of(self._query(pgq_ticker.TICK_POLL_SQL, args))
            else:
                poll = Poll.of(self._query(pgq_ticker.POLL_SQL, (*lock, margin, queue, consumer, queue)))
        self._last = poll
        nothing_to_tick = tick and poll.batch is None
        # from now, not from when the poll was sent: due counts from its transaction's start, and a
        # tick attempted before the lag is reached by the database's clock would find nothing to do
        self._tick_at = time.monotonic() + (self.poll_interval if nothing_to_tick else max(poll.due or 0.0, 0.0))
        return poll

    def _moved_past_kafka(self, batch: Batch) -> bool:
        """Whether batch starts before the last tick known to be whole in Kafka and ends after it,
        which only a batch opened over another's (by a relay of the set without POLL_LOCK, or
        before a crash lost its opening) can: then the consumer is moved to that tick
        (pgq.register_consumer_at, which drops the open batch) and True, the next poll opens the
        batch after it. Its events up to that tick would otherwise come a second time."""
        done = self._in_kafka
        if done is None or not batch.prev_tick_id < done < batch.cur_tick_id:
            return False
        log.warning("batch %d of queue %s spans ticks %d..%d, and tick %d is in Kafka already (another relay of "
                    "the set opened this batch over the one it relayed): the consumer moves to tick %d",
                    batch.batch_id, self.queue, batch.prev_tick_id, batch.cur_tick_id, done, done)
        self._query(pgq_ticker.POLL_LOCK + "SELECT pgq.register_consumer_at(%s, %s, %s)",
                    (*pgq_ticker.poll_lock(self.queue, self.consumer), self.queue, self.consumer, done))
        self._open = self._last = None  # poll again at once
        return True

    def _behind(self) -> bool:
        """Whether the last poll saw ticks after its batch's."""
        return self._last is not None and self._last.behind

    def _maintain(self) -> None:
        """PgQ's maintenance (rotation, vacuum, retry) when maint_interval has passed."""
        if not self.maint_interval or time.monotonic() < self._next_maint:
            return
        self._next_maint = time.monotonic() + self.maint_interval
        self._ahead.close()  # its read locks the event tables that rotation truncates: the loop would wait on itself
        try:
            with self._ctl.cursor() as cur:
                done = pgq_ticker.maintain(cur)
        except psycopg2.errors.InsufficientPrivilege as exc:
            self.maint_interval = 0  # a role without PgQ's admin rights (docs/security.rst): never again
            log.warning("PgQ maintenance of queue %s is left to pgqd (or a role with pgq_admin): the relay's role may "
                        "not run it (%s)", self.queue, str(exc).strip().splitlines()[0])
            return
        except psycopg2.Error as exc:
            self._raise(exc)
        if done:
            log.info("PgQ maintenance: %s", ", ".join(done))

    def _batch(self, batch: Batch, snapshot: str | None) -> Iterator[Item]:
        """A batch's events as items, skipping transactions visible in snapshot (the handoff);
        with runs, a transaction's consecutive I/U/D rows of one ts_ms as ChangeRuns, and small whole
        transactions of such rows as TxnRuns (:func:`pgshovel2.relay.pgq.runs.txn_bounds`)."""
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
            self._raise(exc, batch)

    def _chunks(self, batch: Batch, snapshot: str | None) -> Iterator[list[tuple]]:
        """A batch's rows, read ahead (:mod:`pgshovel2.relay.pgq.ahead`) or read now
        (:meth:`_query_chunks`), in one transaction of the read connection; once they are all read
        and the relay is behind, the read of the next batch starts."""
        self._ahead.wait()
        try:
            batch_sql = batch.batch_sql
            if batch_sql is None:
                with self._ctl.cursor() as cur:
                    cur.execute("SELECT pgq.batch_event_sql(%s)", (batch.batch_id,))
                    batch_sql = cur.fetchone()[0]
            chunks = self._ahead.take(batch.prev_tick_id, batch.cur_tick_id, batch_sql, snapshot)
            yield from chunks if chunks is not None else self._query_chunks(batch, batch_sql, snapshot)
        finally:
            try:
                self._read.rollback()
            except psycopg2.Error:  # the connection is gone: reported by the read that failed
                pass
        if self._behind() and self.read_ahead:
            self._ahead.start(self.queue, self.consumer, batch.cur_tick_id, True, pgq_ticker.MERGE_COUNT, snapshot)

    def _query_chunks(self, batch: Batch, batch_sql: str, snapshot: str | None) -> Iterator[list[tuple]]:
        """A batch of up to fetch_size queued events in one query, on the control connection (no
        transaction to begin and end: its events can no longer change); a larger one (or one that
        turns out larger: transactions older than its first tick committed in it) through a
        server-side cursor of the read connection, which costs the database three more statements."""
        if batch.queued <= self.fetch_size:
            with self._ctl.cursor() as cur:
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
        it, and the batch, read again, is covered by the position committed in Kafka. The next tick
        is then due no sooner than ticker_max_lag from now: while the relay keeps up, a batch and its
        Kafka transaction every ticker_max_lag plus the time a batch takes, so a busier relay makes
        fewer, larger ones (a relay that is behind does not wait)."""
        if position.complete:
            self._in_kafka = max(self._in_kafka or 0, position.unit)
        batch = self._open
        if batch is None or not position.complete or position.unit < batch.cur_tick_id:
            return
        row = self._query(f"SELECT pgq.finish_batch(%s), {pgq_ticker.ASYNC_COMMIT}", (batch.batch_id,))
        if row is None or row[0] != 1:
            log.warning("batch %d of queue %s was already acknowledged by another relay of this set",
                        batch.batch_id, self.queue)
        self._open = None
        self._tick_at = max(self._tick_at, time.monotonic() + (self._last.max_lag if self._last else 0.0))

    def wait(self, timeout: float) -> None:
        """Sleep timeout seconds (PgQ has nothing to wait on)."""
        if timeout > 0:
            time.sleep(timeout)

    def lag(self) -> Lag:
        """(seconds, events) the consumer is behind, from pgq.get_consumer_info: its lag (the age of
        its last finished tick) while events are pending, 0 with none (an idle queue ticks rarely,
        and that age is no wait)."""
        row = self._query("SELECT extract(epoch FROM lag), pending_events FROM pgq.get_consumer_info(%s, %s)",
                          (self.queue, self.consumer))
        if not row:
            return Lag(0.0, 0)
        events = int(row[1] or 0)
        return Lag(float(row[0] or 0) if events else 0.0, events)

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

