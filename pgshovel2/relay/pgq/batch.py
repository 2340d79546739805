"""A PgQ batch as the trigger source reads it: what a poll opens (:class:`Poll`, :class:`Batch`),
the query of its events (:func:`events_query`) and PgQ's errors for a batch already finished."""

from dataclasses import dataclass

import psycopg2
from psycopg2 import sql


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
    batch_sql: str | None = None  # pgq.batch_event_sql's text for it, when the poll read it


@dataclass(frozen=True)
class Poll:
    """What a poll (pgq_ticker.POLL_SQL) found: the batch it opened or None; due: seconds until the
    queue's next tick is due (<= 0: due now; None: the queue has no tick); behind: ticks after the
    batch's are there already; max_lag: the queue's ticker_max_lag, seconds."""

    batch: Batch | None
    due: float | None
    behind: bool
    max_lag: float = 0.0

    @classmethod
    def of(cls, row: tuple | None) -> "Poll":
        """The poll of a POLL_SQL row (None: the queue's row is gone, read as a due tick)."""
        if row is None:
            return cls(None, None, False)
        batch = Batch(row[0], row[1], row[2], row[3] or 0, row[4]) if row[0] is not None else None
        return cls(batch, row[5], bool(row[6]), row[7] or 0.0)


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
# (190 ms -> 164 ms in memory). Session-wide on the trigger source's two connections only.
READ_SETTINGS = "SET work_mem = '32MB'"
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
