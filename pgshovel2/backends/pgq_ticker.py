"""PgQ ticking and maintenance without pgqd, done by the relay of a trigger set.

pgqd (PgQ's daemon) ticks every queue (``pgq.ticker()``) and runs ``pgq.maint_operations()``
(table rotation, vacuum of PgQ's tables, extra maintenance) every ``maint_period``. Managed
databases have no pgqd, so the relay's source (pgshovel2.relay.pgq.source) ticks its own
queue once its last tick is older than the queue's ``ticker_max_lag`` plus
:data:`TICK_MARGIN` seconds (none: the tick bounds the trigger backend's latency; where pgqd
also ticks, ``pgq.ticker`` makes one tick of the two calls): each poll (:data:`POLL_SQL`) says
when the next tick is due, and the source ticks then and opens the tick's batch in the same round
trip (:data:`TICK_POLL_SQL`) -- and runs the maintenance every ``maint_interval`` seconds. pgqd
stays supported; both may run.

Who ticked the queue last is told by the relay's session: its ``application_name`` is
``pgshovel2 relay <tag> tick <id>`` after it made tick id (:func:`relay_tag`), which
``set status`` compares with the queue's last tick (:func:`who_ticks`).
"""

import hashlib
import logging
from typing import Any

import psycopg2
from psycopg2 import sql

from pgshovel2.db import one_row

log = logging.getLogger(__name__)

TICK_MARGIN = 0.0  # seconds past ticker_max_lag before the relay ticks itself
MAINT_INTERVAL = 60.0  # seconds between maintenance runs (pgqd's maint_period default: 120)

# A select-list item that makes the statement's transaction commit without waiting for the WAL
# flush: for the relay's bookkeeping, which a crash may lose (the consumer moves back, never ahead
# of Kafka, and the batch comes again, covered by the position committed there).
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"
# ASYNC_COMMIT, but a local flush where the session's own setting is off (server, database or role):
# a tick committed so is visible before it is durable, and a crash that lost the tick of a batch
# already relayed would bring its events back at another unit (or give its id to a later tick).
# Flushing the WAL up to the commit that opens the batch makes every tick before it durable.
OPEN_COMMIT = ("set_config('synchronous_commit', CASE current_setting('synchronous_commit') "
               "WHEN 'off' THEN 'local' ELSE 'off' END, true)")

# OPEN_COMMIT for a transaction that ticks and opens the batch of that tick: it commits at the
# session's own setting (a local flush where that is off), so the tick is durable before any of
# its batch reaches Kafka.
TICK_OPEN_COMMIT = ("set_config('synchronous_commit', CASE current_setting('synchronous_commit') "
                    "WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true)")

# One row per poll: the next batch (NULLs when none): its id, ticks, the events queued between
# them (its size, unless transactions older than its first tick committed in it) and the text of
# pgq.batch_event_sql for it; the seconds until the queue's next tick is due (ticker_max_lag plus
# TICK_MARGIN after its last tick; <= 0: due now; NULL: no tick yet); whether ticks after the
# batch's are there already (the relay is behind); ticker_max_lag in seconds. The queue's last
# tick is read from pgq.tick, not through pgq.get_queue_info (three queries and a sequence read,
# for a lag). Its transaction, which opens the batch, commits as {commit} says: a crash can only
# lose it, and the batch is opened again. Parameters (after POLL_LOCK's): TICK_MARGIN, the batch
# function's (queue, consumer[, min_count]), queue.
_POLL = """
SELECT b.batch_id, b.prev_tick_id, b.cur_tick_id, b.cur_tick_event_seq - b.prev_tick_event_seq,
       CASE WHEN b.batch_id IS NOT NULL THEN pgq.batch_event_sql(b.batch_id) END,
       extract(epoch FROM q.queue_ticker_max_lag - (now() - t.tick_time))::float8 + %s,
       b.cur_tick_id < t.tick_id, extract(epoch FROM q.queue_ticker_max_lag)::float8, {commit}
FROM {batch} b, pgq.queue q LEFT JOIN LATERAL (
    SELECT tick_id, tick_time FROM pgq.tick WHERE tick_queue = q.queue_id
    ORDER BY tick_queue DESC, tick_id DESC LIMIT 1) t ON true
WHERE q.queue_name = %s
"""
# The first statement of every poll: one poll of a consumer at a time. pgq.next_batch_custom reads
# the subscription without locking it, so two relays of a set polling at once (a paused former
# relay resumed while its successor polls) could both find no open batch and both open one; the
# later one overwrites the batch the other's relay is reading, whose finish_batch then finds nothing
# to finish, and the overwriting batch starts at the same tick: its events would come twice. Held
# to the end of the poll's transaction; the PgQ statements after it see the batch the other poll
# opened, and return it. Parameters: poll_lock(queue, consumer).
POLL_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s));"
POLL_LOCK_CLASS = 1885827378  # the advisory locks' first key, for PgQ consumers ("pgq2")
_NEXT = "pgq.next_batch_info(%s, %s)"
POLL_SQL = POLL_LOCK + _POLL.format(batch=_NEXT, commit=OPEN_COMMIT)
# POLL_SQL for a relay that is behind: a batch over as many ticks as it takes to hold MERGE_COUNT
# events (pgq.next_batch_custom's min_count), or no batch when fewer are queued (a NULL row: the
# relay polls again with POLL_SQL). Fewer, larger batches: each one costs a Kafka commit and its
# round trips, whatever its size. Deterministic where it matters: an open batch stays the
# consumer's batch, ticks and all, until it is finished, across restarts. Parameters: poll_lock's,
# TICK_MARGIN, queue, consumer, MERGE_COUNT, queue.
POLL_MERGED_SQL = POLL_LOCK + _POLL.format(batch="pgq.next_batch_custom(%s, %s, NULL, %s, NULL)", commit=OPEN_COMMIT)
# A tick when PgQ's rules want one (pgq.ticker(queue); the session's application_name then names
# it, see relay_tag), then POLL_SQL, in one round trip and one transaction, which commits as
# TICK_OPEN_COMMIT says. Parameters: poll_lock's, application_name's prefix, queue, then POLL_SQL's
# after poll_lock's.
TICK_POLL_SQL = (POLL_LOCK + "SELECT CASE WHEN t IS NOT NULL THEN set_config('application_name', %s || t, false) END "
                 "FROM pgq.ticker(%s) t;" + _POLL.format(batch=_NEXT, commit=TICK_OPEN_COMMIT))
MERGE_COUNT = 20_000  # events in a batch opened while the relay is behind, at least


def poll_lock(queue: str, consumer: str) -> tuple[int, str]:
    """The parameters of POLL_LOCK for consumer of queue: (POLL_LOCK_CLASS, "queue/consumer")."""
    return POLL_LOCK_CLASS, f"{queue}/{consumer}"


def relay_tag(queue: str) -> str:
    """A short tag of queue for the relay's application_name (names are up to 63 bytes)."""
    return hashlib.sha1(queue.encode()).hexdigest()[:8]


def tick_name(queue: str) -> str:
    """The prefix of application_name a relay's session takes after it ticked queue (TICK_POLL_SQL)."""
    return f"pgshovel2 relay {relay_tag(queue)} tick "


def maintain(cur) -> list[str]:
    """Run what ``pgq.maint_operations()`` asks for, each in its own transaction (cur's
    connection must be in autocommit), as pgqd does; returns what ran. A failing operation is
    logged and skipped (pgqd does the same); psycopg2.OperationalError (the database went
    away) is raised."""
    cur.execute("SELECT func_name, func_arg FROM pgq.maint_operations()")
    done = []
    for func, arg in cur.fetchall():
        try:
            cur.execute(_statement(func, arg))
            done.append(f"{func}({arg or ''})")
        except psycopg2.OperationalError:
            raise
        except psycopg2.Error as exc:
            log.warning("PgQ maintenance %s(%s) failed: %s", func, arg or "", str(exc).strip())
    cur.execute("SELECT pgq.maint_retry_events()")
    return done


def _statement(func: str, arg: str | None) -> sql.Composable:
    if func == "vacuum":
        return sql.SQL("VACUUM {}").format(sql.Identifier(*arg.split(".", 1)))
    name = sql.Identifier(*func.split(".", 1))
    if arg is None:
        return sql.SQL("SELECT {}()").format(name)
    return sql.SQL("SELECT {}({})").format(name, sql.Literal(arg))


def who_ticks(dsn: str, queue: str) -> dict[str, Any]:
    """{ticker: "relay"|"pgqd"|"nobody", last_tick, last_tick_age_seconds} of queue, or {error}.

    "relay": the set's relay made the queue's last tick; "pgqd": another ticker did (pgqd, or
    anything calling pgq.ticker); "nobody": the queue never ticked past its creation.
    """
    row = one_row(dsn, "SELECT q.last_tick_id, extract(epoch FROM q.ticker_lag)::float8, "
                  "(SELECT max(substring(application_name FROM ' tick ([0-9]+)$')::int8) FROM pg_stat_activity "
                  " WHERE datname = current_database() AND application_name LIKE %s) "
                  "FROM pgq.get_queue_info(%s) q", (f"{tick_name(queue)}%", queue),
                  ("last_tick", "last_tick_age_seconds", "relay_tick"))
    if row is None:
        return {"error": f"no queue {queue}"}
    if "error" in row:
        return row
    relay_tick = row.pop("relay_tick")
    if relay_tick is not None and relay_tick >= row["last_tick"]:
        row["ticker"] = "relay"
    else:
        row["ticker"] = "pgqd" if row["last_tick"] and row["last_tick"] > 1 else "nobody"
    return row
