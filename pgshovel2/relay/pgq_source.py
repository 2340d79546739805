"""PgQ source: batches of a set's queue, streamed grouped by transaction.

Position of a batch: its tick range (prev_tick_id, cur_tick_id]; batch ids are
not stable across retries (next_batch draws them from a sequence).
"""

import logging
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import NamedTuple

import psycopg2

from pgshovel2.codec.rows import loads_row
from pgshovel2.db import connect
from pgshovel2.errors import FencedError, RelayError, UnavailableError
from pgshovel2.relay.prefetch import prefetch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """An open PgQ batch; from pgq.next_batch_info."""

    batch_id: int
    prev_tick_id: int
    cur_tick_id: int


class Event(NamedTuple):
    """One captured change (a tuple: one is made per change, so it must be cheap).

    txid: 64-bit epoch txid; ts_ms: capture time, ms since epoch; op: I/U/D/T;
    row, before: decoded trigger rows (lists) or None; table: table tag.
    """

    txid: int
    ts_ms: int
    op: str
    row: list | None
    table: str
    before: list | None


# Events grouped by transaction, transactions in commit order: a transaction
# that waited for another's row lock inserted its events after the other's
# last one, so ordering transactions by their last ev_id keeps per-key order.
_EVENTS_SQL = """
SELECT ev_txid, (extract(epoch FROM ev_time) * 1000)::int8, ev_type, ev_data, ev_extra1, ev_extra2
FROM (SELECT e.*, max(ev_id) OVER (PARTITION BY ev_txid) AS tx_last
      FROM pgq.get_batch_events(%(batch)s) e) e
WHERE %(snapshot)s::txid_snapshot IS NULL
   OR NOT txid_visible_in_snapshot(ev_txid, %(snapshot)s::txid_snapshot)
ORDER BY tx_last, ev_id
"""


class PgqSource:
    """Reads a set's queue as consumer. dsn: libpq DSN of the set's database."""

    def __init__(self, dsn: str, queue: str, consumer: str, fetch_size: int = 5000):
        self.queue, self.consumer, self.fetch_size = queue, consumer, fetch_size
        self._ctl = connect(dsn, f"queue {queue}", UnavailableError)
        self._read = connect(dsn, f"queue {queue}", UnavailableError)
        self._ctl.autocommit = True

    def next_batch(self) -> Batch | None:
        """The consumer's open batch, or a new one; None when no tick is ahead."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT batch_id, prev_tick_id, cur_tick_id FROM pgq.next_batch_info(%s, %s)",
                        (self.queue, self.consumer))
            row = cur.fetchone()
        return Batch(*row) if row and row[0] is not None else None

    def last_tick(self) -> int:
        """The consumer's last finished tick id (pgq.get_consumer_info last_tick).

        Raises RelayError when the consumer is not registered on the queue.
        """
        with self._ctl.cursor() as cur:
            cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, %s)", (self.queue, self.consumer))
            row = cur.fetchone()
        if row is None:
            raise RelayError(f"consumer {self.consumer} is not registered on queue {self.queue}: "
                             "was the set dropped?")
        return int(row[0])

    def tick(self) -> bool:
        """Ask PgQ for a tick now (it ticks only past the queue's thresholds); True if it ticked."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT pgq.ticker(%s)", (self.queue,))
            return cur.fetchone()[0] is not None

    def events(self, batch: Batch, snapshot: str | None) -> Iterator[Event]:
        """Stream a batch's events, skipping transactions visible in snapshot.

        snapshot: txid_snapshot text of the relay's initial snapshot, or None.
        Rows are fetched by a worker thread (server-side cursor, fetch_size
        rows at a time, two chunks ahead), so memory stays bounded.
        """
        loads = loads_row  # not json.loads: rows queued by older capture code write -0.0 as -0
        try:
            with closing(prefetch(self._chunks(batch, snapshot))) as chunks:
                for rows in chunks:
                    for txid, ts_ms, op, data, table, before in rows:
                        yield Event(txid, ts_ms, op, loads(data) if data else None, table,
                                    loads(before) if before else None)
        except psycopg2.errors.RaiseException as exc:
            if "batch not found" in str(exc):
                # Only the owner of the set's transactional id acknowledges batches (after a Kafka
                # commit), so another relay owns the set now: stop rather than fence it back.
                raise FencedError(f"batch {batch.batch_id} of queue {self.queue} was acknowledged by another "
                                  "relay of this set while this one read it: another relay took over; "
                                  "this one stops") from exc
            raise
        finally:
            self._read.rollback()

    def _chunks(self, batch: Batch, snapshot: str | None) -> Iterator[list[tuple]]:
        with self._read.cursor(name=f"batch_{batch.batch_id}") as cur:
            cur.execute(_EVENTS_SQL, {"batch": batch.batch_id, "snapshot": snapshot})
            while rows := cur.fetchmany(self.fetch_size):
                yield rows

    def finish(self, batch: Batch) -> None:
        """Acknowledge a batch (pgq.finish_batch): its events are never read again.

        Called only after the batch is committed in Kafka, so a batch another
        relay of the set acknowledged first is only logged.
        """
        with self._ctl.cursor() as cur:
            cur.execute("SELECT pgq.finish_batch(%s)", (batch.batch_id,))
            if cur.fetchone()[0] != 1:
                log.warning("batch %d of queue %s was already acknowledged by another relay of this set",
                            batch.batch_id, self.queue)

    def lag(self) -> tuple[float, int]:
        """(seconds, events) the consumer is behind, from pgq.get_consumer_info."""
        with self._ctl.cursor() as cur:
            cur.execute("SELECT extract(epoch FROM lag), pending_events "
                        "FROM pgq.get_consumer_info(%s, %s)", (self.queue, self.consumer))
            row = cur.fetchone()
        return (float(row[0] or 0), int(row[1] or 0)) if row else (0.0, 0)

    def close(self) -> None:
        """Close both connections."""
        self._ctl.close()
        self._read.close()


def wait_caught_up(dsn: str, queue: str, consumer: str, timeout: float = 120.0) -> int:
    """Wait until consumer has finished every event committed before the call.

    Forces a tick after the last committed event, then waits until the
    consumer's last finished tick reaches it; returns that tick id. Raises
    RelayError after timeout seconds.
    """
    conn = connect(dsn, f"queue {queue}", RelayError)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pgq.force_tick(%s)", (queue,))
            cur.execute("SELECT pgq.ticker(%s)", (queue,))
            cur.execute("SELECT last_tick_id FROM pgq.get_queue_info(%s)", (queue,))
            target = cur.fetchone()[0]
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, %s)", (queue, consumer))
                if cur.fetchone()[0] >= target:
                    return target
                if time.monotonic() > deadline:
                    raise RelayError(f"consumer {consumer} of queue {queue} did not reach tick "
                                     f"{target} within {timeout:g}s: is the relay running?")
                time.sleep(0.1)
    finally:
        conn.close()
