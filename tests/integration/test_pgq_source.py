"""PgqSource against a real PgQ queue: a relay that reads a batch which another relay of the set
has finished (the zombie of test_exactly_once.py, paused between opening a batch and reading its
events, while its successor relayed and acknowledged that batch) stops as fenced, whichever PgQ
function notices first that the batch is gone."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import pytest

from pgshovel2.backends import pgq_ticker
from pgshovel2.errors import FencedError
from pgshovel2.relay.pgq_source import Batch, PgqSource, batch_gone
from pgshovel2.setrecord import TriggerCapture


@pytest.fixture
def queue(db):
    """A fresh PgQ queue with consumer 'c' and one event in a batch; dropped afterwards."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")  # set create makes it; this test makes no set
        cur.execute("SELECT pgq.create_queue(%s)", (name,))
        cur.execute("SELECT pgq.register_consumer(%s, 'c')", (name,))
        cur.execute("SELECT pgq.insert_event(%s, 'I', '[1]')", (name,))
        cur.execute("SELECT pgq.ticker(%s)", (name,))
    yield name
    with db.cursor() as cur:
        cur.execute("SELECT pgq.unregister_consumer(%s, 'c')", (name,))
        cur.execute("SELECT pgq.drop_queue(%s)", (name,))


def test_reading_a_batch_another_relay_finished_stops_as_fenced(stack, db, queue):
    with db.cursor() as cur:
        cur.execute("SELECT batch_id, prev_tick_id, cur_tick_id FROM pgq.next_batch_info(%s, 'c')", (queue,))
        batch = Batch(*cur.fetchone())
        assert batch.batch_id is not None
        cur.execute("SELECT pgq.finish_batch(%s)", (batch.batch_id,))  # the relay that took over
    source = PgqSource(stack.dsn, TriggerCapture(queue, "t", "c"), maint_interval=0)
    try:
        with pytest.raises(FencedError, match=f"batch {batch.batch_id} .* another relay took over"):
            list(source._event_chunks(batch, None))
    finally:
        source.close()


def test_the_read_session_sorts_batches_in_memory_after_reading_one(stack, db, queue):
    """The events query sorts a whole batch twice; the read connection's larger work_mem is a
    session setting, which must outlive the rollback that ends each batch's read."""
    batch = _open_batch(db, queue)
    source = PgqSource(stack.dsn, TriggerCapture(queue, "t", "c"), maint_interval=0)
    try:
        assert [row[3] for chunk in source._event_chunks(batch, None) for row in chunk] == ["[1]"]
        with source._read.cursor() as cur:
            cur.execute("SELECT current_setting('work_mem'), source FROM pg_settings WHERE name = 'work_mem'")
            assert cur.fetchone() == ("32MB", "session")
    finally:
        source.close()


def test_both_errors_pgq_gives_for_a_finished_batch_mean_it_is_gone():
    """A finish between pgq.batch_event_sql's check and pgq.batch_event_tables' (the CI race of
    test_zombie_relay_is_fenced) gives the second message; any other error is not taken for it."""
    raise_exc = psycopg2.errors.RaiseException
    assert batch_gone(raise_exc("batch not found\nCONTEXT:  PL/pgSQL function pgq.batch_event_sql(bigint)"))
    assert batch_gone(raise_exc("Cannot find data for batch 2664\nCONTEXT:  PL/pgSQL function "
                                "pgq.batch_event_tables(bigint) line 31 at RAISE"))
    assert not batch_gone(raise_exc("Unknown queue: q"))
    assert not batch_gone(psycopg2.errors.UndefinedTable("relation pgq.event_5_1 does not exist: batch not found"))


def _open_batch(db, queue: str) -> Batch:
    """The consumer's next batch (PgqSource's poll), with the events queued between its ticks."""
    with db.cursor() as cur:
        cur.execute("SELECT batch_id, prev_tick_id, cur_tick_id, cur_tick_event_seq - prev_tick_event_seq "
                    "FROM pgq.next_batch_info(%s, 'c')", (queue,))
        return Batch(*cur.fetchone())


@contextmanager
def ticking_queue(db) -> Iterator[str]:
    """A fresh PgQ queue with consumer 'c' that ticks only at the test's tick() calls: its ticker is
    paused, so pgqd (pgq.ticker() skips paused queues) adds no tick of its own; dropped afterwards."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        cur.execute("SELECT pgq.create_queue(%s)", (name,))
        for key in ("ticker_max_lag", "ticker_idle_period"):
            cur.execute("SELECT pgq.set_queue_config(%s, %s, '0')", (name, key))
        cur.execute("SELECT pgq.set_queue_config(%s, 'ticker_paused', 'true')", (name,))
        cur.execute("SELECT pgq.register_consumer(%s, 'c')", (name,))
    try:
        yield name
    finally:
        with db.cursor() as cur:
            cur.execute("SELECT pgq.unregister_consumer(%s, 'c')", (name,))
            cur.execute("SELECT pgq.drop_queue(%s)", (name,))


def tick(cur, queue: str) -> None:
    """One tick of a ticking_queue: its ticker is unpaused only inside this one transaction (a
    multi-statement query), which no other ticker sees."""
    cur.execute("UPDATE pgq.queue SET queue_ticker_paused = false WHERE queue_name = %(q)s;"
                " SELECT pgq.ticker(%(q)s);"
                " UPDATE pgq.queue SET queue_ticker_paused = true WHERE queue_name = %(q)s", {"q": queue})


def test_a_batch_bigger_than_the_events_queued_between_its_ticks_is_read_whole(stack, db):
    """A batch of few queued events is read in one query of at most fetch_size + 1 rows; a
    transaction that began before the batch's first tick and commits in it makes it bigger than
    that count says: the source reads it all again through a cursor, fetch_size rows at a time,
    every event once and in order."""
    older = psycopg2.connect(stack.dsn)
    source = None
    try:
        with ticking_queue(db) as name:
            with db.cursor() as cur:
                with older.cursor() as old:
                    for i in range(25):
                        old.execute("SELECT pgq.insert_event(%s, 'I', %s)", (name, f"[{i}]"))
                tick(cur, name)  # the older transaction is still open
                cur.execute("SELECT pgq.insert_event(%s, 'I', '[100]')", (name,))
                tick(cur, name)
            source = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0, fetch_size=10)
            seen = []
            while len(seen) < 26:
                batch = _open_batch(db, name)
                assert batch.batch_id is not None, f"{len(seen)} of 26 events read, no batch left"
                chunks = list(source._event_chunks(batch, None))
                events = [row[3] for chunk in chunks for row in chunk]
                if events == ["[100]"]:
                    assert batch.queued <= 10 and [len(c) for c in chunks] == [1]  # one query
                    older.commit()
                    with db.cursor() as cur:
                        tick(cur, name)
                elif events:
                    assert batch.queued <= 10, "the batch of the older transaction must look small"
                    assert [len(c) for c in chunks] == [10, 10, 5]
                seen += events
                with db.cursor() as cur:
                    cur.execute("SELECT pgq.finish_batch(%s)", (batch.batch_id,))
            assert seen == ["[100]"] + [f"[{i}]" for i in range(25)]
    finally:
        older.close()
        if source is not None:
            source.close()


@pytest.mark.parametrize(("session", "opens_with"), [("off", "local"), ("on", "off"), ("remote_apply", "off")])
def test_the_poll_that_opens_a_batch_flushes_the_wal_where_ticks_may_not_have(stack, queue, session, opens_with):
    """A tick committed with synchronous_commit off is visible before it is durable: where the
    session's setting is off (as a ticker's may be: server, database or role), the transaction of
    the poll that opens a batch commits with a local WAL flush, which makes its ticks durable before
    any of the batch reaches Kafka; elsewhere ticks are durable once visible and the poll skips
    the flush. The batch bookkeeping's own commits never wait (finish_batch: ASYNC_COMMIT)."""
    conn = psycopg2.connect(stack.dsn, options=f"-c synchronous_commit={session}")
    try:
        with conn.cursor() as cur:  # one transaction, as the source's autocommit statement is
            cur.execute(pgq_ticker.POLL_SQL, (pgq_ticker.TICK_MARGIN, queue, "c", queue))
            assert cur.fetchone()[0] is not None  # the queue fixture's batch: the poll opened it
            cur.execute("SHOW synchronous_commit")
            assert cur.fetchone()[0] == opens_with
            cur.execute(f"SELECT {pgq_ticker.ASYNC_COMMIT}")
            assert cur.fetchone()[0] == "off"
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("SHOW synchronous_commit")
            assert cur.fetchone()[0] == session  # local to the transaction
    finally:
        conn.close()


def test_a_relay_that_is_behind_opens_batches_over_several_ticks(stack, db, monkeypatch):
    """Behind (the poll saw ticks after its batch's), the source opens a batch over as many ticks as
    hold MERGE_COUNT events, or the next tick's alone when fewer are queued; its events come once
    and in order. An open batch spanning ticks is the consumer's batch after a restart too (a
    position inside it resumes in the same batch)."""
    monkeypatch.setattr(pgq_ticker, "MERGE_COUNT", 50)
    sources = []
    try:
        with ticking_queue(db) as name:
            with db.cursor() as cur:
                for n in range(6):
                    cur.execute("SELECT pgq.insert_event(%s, 'I', format('[%%s]', i)) FROM generate_series(%s, %s) i",
                                (name, 30 * n, 30 * n + 29))
                    tick(cur, name)
            source = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0)
            sources.append(source)
            spans, seen = [], []
            while (row := source._poll())[0] is not None:
                batch = Batch(*row[:3], row[4])
                if len(spans) == 1:  # a restarted relay's first poll gives the open batch, ticks and all
                    again = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0)
                    sources.append(again)
                    assert again._poll()[:3] == row[:3]
                events = [r[3] for chunk in source._event_chunks(batch, None) for r in chunk]
                spans.append((batch.cur_tick_id - batch.prev_tick_id, len(events)))
                seen += events
                with db.cursor() as cur:
                    cur.execute("SELECT pgq.finish_batch(%s)", (batch.batch_id,))
            assert spans == [(1, 30), (2, 60), (3, 90)]
            assert seen == [f"[{i}]" for i in range(180)]
    finally:
        for source in sources:
            source.close()
