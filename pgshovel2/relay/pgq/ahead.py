"""Reading a trigger set's next PgQ batch before it is opened.

PgQ opens a consumer's next batch only after ``pgq.finish_batch`` of the current one, which the
relay calls after its Kafka commit; the events query of a merged batch then sorts the whole batch
before its first row comes (tens of ms for 20,000 events), and the relay loop waits for it. While a
relay works through a backlog, the next batch's ticks are already there, so its query can run
while the loop still relays, commits and acknowledges the current batch.

:func:`predict` says which ticks the relay's next poll will open (PgQ's own choice, see
``pgq.next_batch_custom`` and ``pgq.find_tick_helper``) and builds the text ``pgq.batch_event_sql``
would return for them. :class:`ReadAhead` runs the events query of that text on a server-side cursor
in a thread and keeps its first chunk. It is used only when the batch then opened has the same
ticks and ``pgq.batch_event_sql`` returns the very same text: the query is then the one the relay
would run, over events that can no longer change (every transaction of the tick range had committed
before the later tick was taken), in the same order, so ordinals and positions are those of a plain
read. Anything else -- another batch, other text, an error -- and the read-ahead is dropped and the
batch read as before.
"""

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

log = logging.getLogger(__name__)

# The inputs of pgq.batch_event_sql and pgq.batch_event_tables for the tick range (prev, next] of
# consumer's subscription, and PgQ's choice of next (next_batch_custom with min_count, and
# without: the first tick after prev). Parameters: queue, consumer, prev (the tick the open batch
# ends at), min_count.
_PREDICT_SQL = """
WITH sub AS (
    SELECT q.queue_id, s.sub_id, q.queue_data_pfx, q.queue_ntables, q.queue_cur_table,
           q.queue_switch_step1, q.queue_switch_step2, t.tick_event_seq AS prev_seq
    FROM pgq.queue q
    JOIN pgq.subscription s ON s.sub_queue = q.queue_id
    JOIN pgq.consumer c ON c.co_id = s.sub_consumer
    JOIN pgq.tick t ON t.tick_queue = q.queue_id AND t.tick_id = %(prev)s
    WHERE q.queue_name = %(queue)s AND c.co_name = %(consumer)s),
later AS (
    SELECT t.tick_id, t.tick_event_seq - sub.prev_seq AS events
    FROM pgq.tick t, sub WHERE t.tick_queue = sub.queue_id AND t.tick_id > %(prev)s)
SELECT sub.queue_id, sub.sub_id,
       pgq.quote_fqname(sub.queue_data_pfx || '_' || CASE WHEN sub.queue_cur_table = 0
                        THEN sub.queue_ntables - 1 ELSE sub.queue_cur_table - 1 END),
       pgq.quote_fqname(sub.queue_data_pfx || '_' || sub.queue_cur_table),
       sub.queue_switch_step1, sub.queue_switch_step2,
       (SELECT max(tick_id) FROM later), (SELECT events FROM later ORDER BY tick_id DESC LIMIT 1),
       (SELECT min(tick_id) FROM later WHERE events >= %(min_count)s), (SELECT min(tick_id) FROM later)
FROM sub
"""
_NEXT_SQL = """
SELECT txid_snapshot_xmin(p.tick_snapshot), txid_snapshot_xmax(p.tick_snapshot),
       txid_snapshot_xmax(t.tick_snapshot),
       ARRAY(SELECT x FROM txid_snapshot_xip(p.tick_snapshot) x
             WHERE x NOT IN (SELECT txid_snapshot_xip(t.tick_snapshot)) ORDER BY 1 DESC)
FROM pgq.tick p, pgq.tick t
WHERE p.tick_queue = %(queue_id)s AND p.tick_id = %(prev)s AND t.tick_queue = %(queue_id)s AND t.tick_id = %(next)s
"""
_FIELDS = "select ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4"


@dataclass(frozen=True)
class Prediction:
    """The batch a relay's next poll opens: its ticks (prev_tick, cur_tick] and the text
    pgq.batch_event_sql returns for it (compared with the real one before use)."""

    prev_tick: int
    cur_tick: int
    batch_sql: str


def choose_tick(merged: bool, min_count: int, latest: int | None, latest_events: int | None,
                first_reaching: int | None, first: int | None) -> int | None:
    """The tick PgQ ends the next batch at: with merged (pgq_ticker.POLL_MERGED_SQL, min_count
    events) find_tick_helper's choice -- the latest tick when it holds between min_count and twice
    that many events, else the first tick reaching min_count -- or, when no tick reaches min_count
    (the merged poll opens nothing), the first tick after the open batch's (pgq_ticker.POLL_SQL)."""
    if latest is None:
        return None
    if merged and latest_events is not None and latest_events >= min_count:
        return latest if latest_events <= 2 * min_count else first_reaching
    return first


def batch_sql(prev_tick: int, cur_tick: int, queue_id: int, sub_id: int, tables: list[str], tx_start: int,
              tx_end: int, gone: list[int]) -> str:
    """The text pgq.batch_event_sql builds for the batch (prev_tick, cur_tick] of subscription sub_id:
    tables: the event tables it reads; tx_start/tx_end: xmax of the two ticks' snapshots; gone: txids
    in progress at prev_tick and not at cur_tick, highest first (those within 100 of tx_start lower
    it, the others are read by txid)."""
    listed = []
    for txid in gone:
        if tx_start - 100 <= txid:
            tx_start = txid
        else:
            listed.append(str(txid))
    owner = f" and (ev_owner is null or ev_owner = {sub_id})"
    parts = []
    for table in tables:
        part = (f"{_FIELDS} from pgq.tick cur, pgq.tick last, {table} ev "
                f" where cur.tick_id = {cur_tick} and cur.tick_queue = {queue_id}"
                f" and last.tick_id = {prev_tick} and last.tick_queue = {queue_id}"
                f" and ev.ev_txid >= {tx_start} and ev.ev_txid <= {tx_end}"
                " and txid_visible_in_snapshot(ev.ev_txid, cur.tick_snapshot)"
                " and not txid_visible_in_snapshot(ev.ev_txid, last.tick_snapshot)" + owner)
        if listed:
            part += f" union all {_FIELDS} from {table} ev  where ev.ev_txid in ({','.join(listed)}){owner}"
        parts.append(part)
    return " union all ".join(parts) + " order by 1"


def event_tables(prev_table: str, cur_table: str, step1: int | None, step2: int | None, tx_min: int,
                 tx_max: int) -> list[str]:
    """The event tables pgq.batch_event_tables names for a batch whose txids lie in [tx_min, tx_max]
    (xmin of its first tick's snapshot, xmax of its last's), by the queue's last table switch
    (queue_switch_step1/2): the previous table, the current one, or both."""
    if step1 is not None and tx_max < step1:
        return [prev_table]
    if step2 is not None and tx_min > step2:
        return [cur_table]
    return [prev_table, cur_table]


def predict(cur, queue: str, consumer: str, prev_tick: int, merged: bool, min_count: int) -> Prediction | None:
    """The batch after the one ending at prev_tick that consumer's next poll opens (merged: while
    the relay is behind, see :func:`choose_tick`), or None when no tick after prev_tick is there yet.
    cur: a cursor of the relay's read connection. Raises psycopg2.Error."""
    cur.execute(_PREDICT_SQL, {"queue": queue, "consumer": consumer, "prev": prev_tick, "min_count": min_count})
    row = cur.fetchone()
    if row is None:
        return None
    queue_id, sub_id, prev_table, cur_table, step1, step2 = row[:6]
    tick = choose_tick(merged, min_count, *row[6:])
    if tick is None:
        return None
    cur.execute(_NEXT_SQL, {"queue_id": queue_id, "prev": prev_tick, "next": tick})
    found = cur.fetchone()
    if found is None:
        return None
    tx_min, tx_start, tx_end, gone = found
    tables = event_tables(prev_table, cur_table, step1, step2, tx_min, tx_end)
    return Prediction(prev_tick, tick, batch_sql(prev_tick, tick, queue_id, sub_id, tables, tx_start, tx_end,
                                                 list(gone)))


class ReadAhead:
    """One read of a predicted batch, running in a thread on conn (the relay's read connection, which
    nothing else may use from :meth:`start` until :meth:`wait`): a server-side cursor over
    query_of(batch_sql, snapshot) and its first fetch_size rows."""

    def __init__(self, conn, query_of: Callable[[str, str | None], sql.Composable], fetch_size: int):
        self.conn, self.query_of, self.fetch_size = conn, query_of, fetch_size
        self.prediction: tuple[Prediction, str | None] | None = None
        self.used = 0  # batches read ahead and used (tests read it)
        self._cursor = None
        self._first: list[tuple] = []
        self._thread: threading.Thread | None = None

    def start(self, queue: str, consumer: str, prev_tick: int, merged: bool, min_count: int,
              snapshot: str | None) -> None:
        """Predict the batch after prev_tick (:func:`predict`) and run its query, skipping
        transactions visible in snapshot, in a thread."""
        self.wait()
        args = (queue, consumer, prev_tick, merged, min_count, snapshot)
        self._thread = threading.Thread(target=self._run, args=args, name="read-ahead", daemon=True)
        self._thread.start()

    def _run(self, queue: str, consumer: str, prev_tick: int, merged: bool, min_count: int,
             snapshot: str | None) -> None:
        try:
            with self.conn.cursor() as cur:
                prediction = predict(cur, queue, consumer, prev_tick, merged, min_count)
            if prediction is None:
                self.conn.rollback()
                return
            self._cursor = self.conn.cursor(name=f"ahead_{prediction.cur_tick}")
            self._cursor.execute(self.query_of(prediction.batch_sql, snapshot))
            self._first = self._cursor.fetchmany(self.fetch_size)
            self.prediction = (prediction, snapshot)
        except psycopg2.Error as exc:  # the batch is read as usual, where the error shows again
            log.debug("reading the next batch ahead failed: %s", exc)
            self._drop()

    def wait(self) -> None:
        """Wait for the thread: conn is the caller's again (its transaction may hold the read)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def take(self, prev_tick: int, cur_tick: int, batch_sql_text: str,
             snapshot: str | None) -> Iterator[list[tuple]] | None:
        """The rows, in chunks of at most fetch_size, when the batch (prev_tick, cur_tick] whose
        pgq.batch_event_sql text is batch_sql_text, read skipping snapshot, is the one read ahead;
        None otherwise (a read of another batch is dropped). Call :meth:`wait` first. The
        transaction of conn stays open until the chunks are done or closed; the caller ends it."""
        self.wait()
        prediction, self.prediction = self.prediction, None
        if prediction is None:  # none was read: conn's transaction is the caller's, nothing to drop
            return None
        if prediction != (Prediction(prev_tick, cur_tick, batch_sql_text), snapshot):
            log.debug("read ahead ticks %d..%d, opened %d..%d: read again", prediction[0].prev_tick,
                      prediction[0].cur_tick, prev_tick, cur_tick)
            self._drop()
            return None
        self.used += 1
        return self._chunks()

    def _chunks(self) -> Iterator[list[tuple]]:
        cursor, rows, self._cursor, self._first = self._cursor, self._first, None, []
        with cursor:
            while rows:
                yield rows
                if len(rows) < self.fetch_size:
                    break
                rows = cursor.fetchmany(self.fetch_size)

    def close(self) -> None:
        """Wait for the thread and drop what it read (never raises)."""
        self.wait()
        if self.prediction is not None:
            self.prediction = None
            self._drop()

    def _drop(self) -> None:
        cursor, self._cursor, self._first = self._cursor, None, []
        try:
            if cursor is not None:
                cursor.close()
            self.conn.rollback()
        except psycopg2.Error:  # the connection is gone: the next read reports it
            pass
