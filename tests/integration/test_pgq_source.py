"""PgqSource against a real PgQ queue: a relay that reads a batch which another relay of the set
has finished (the zombie of test_exactly_once.py, paused between opening a batch and reading its
events, while its successor relayed and acknowledged that batch) stops as fenced, whichever PgQ
function notices first that the batch is gone."""

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import pytest

from pgshovel2.backends import pgq_ticker
from pgshovel2.errors import FencedError
from pgshovel2.relay.pgq.source import Batch, PgqSource, batch_gone
from pgshovel2.relay.source import Change, Commit, Idle
from pgshovel2.setrecord import TriggerCapture
from pgshovel2.wire import TRIGGER, Position


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


def test_a_poll_whose_batch_another_relay_finished_meanwhile_stops_as_fenced(stack, db, queue):
    """The poll opens the batch and reads pgq.batch_event_sql in one statement (POLL_SQL), and each
    statement in PgQ's functions sees the commits made before it: a successor that acknowledged the
    batch in between (the zombie of test_chaos.py, resumed mid-poll) makes pgq.batch_event_sql fail
    there. The source's statement runner takes that error for a takeover wherever it meets it; here
    from the same call on a batch that is finished already."""
    batch = _open_batch(db, queue)
    with db.cursor() as cur:
        cur.execute("SELECT pgq.finish_batch(%s)", (batch.batch_id,))
    source = PgqSource(stack.dsn, TriggerCapture(queue, "t", "c"), maint_interval=0)
    try:
        with pytest.raises(FencedError, match=r"the batch it opened \(batch not found\) .* another relay took over"):
            source._query("SELECT pgq.batch_event_sql(%s)", (batch.batch_id,))
        assert source._query("SELECT 1", ()) == (1,)  # the control connection is still usable
    finally:
        source.close()


def test_the_read_sessions_sort_batches_in_memory_after_reading_one(stack, db, queue):
    """The events query sorts a whole batch twice; the larger work_mem of both connections a batch
    is read on (the control connection for a small one, the read connection's cursor for a large
    one) is a session setting, which must outlive the rollback that ends a cursor's read."""
    batch = _open_batch(db, queue)
    source = PgqSource(stack.dsn, TriggerCapture(queue, "t", "c"), maint_interval=0)
    try:
        assert [row[3] for chunk in source._event_chunks(batch, None) for row in chunk] == ["[1]"]
        for conn in (source._ctl, source._read):
            with conn.cursor() as cur:
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


def test_two_relays_polling_at_once_share_one_batch(stack, db, queue):
    """A poll that opens a batch (here held open in a transaction of its own) and a poll of another
    relay of the set at the same time: the second waits for the first (POLL_LOCK) and gets the very
    batch it opened. PgQ's next_batch alone lets the second open another batch over the first's
    ticks and more, and the relay of the first then relays those ticks twice (the zombie of
    test_zombie_relay_is_fenced, resumed while its successor polled)."""
    first = psycopg2.connect(stack.dsn)
    source = PgqSource(stack.dsn, TriggerCapture(queue, "t", "c"), maint_interval=0)
    try:
        with first.cursor() as cur:
            cur.execute(pgq_ticker.POLL_SQL, (*pgq_ticker.poll_lock(queue, "c"), pgq_ticker.TICK_MARGIN, queue, "c",
                                              queue))
            opened = cur.fetchone()[0]
        assert opened is not None
        with db.cursor() as cur:
            cur.execute("SELECT pgq.insert_event(%s, 'I', '[2]')", (queue,))
            cur.execute("SELECT pgq.ticker(%s)", (queue,))  # a later tick the second poll could end at
        polled = []
        second = threading.Thread(target=lambda: polled.append(source._poll(False).batch))
        second.start()
        second.join(1.0)
        assert second.is_alive(), "the second poll did not wait for the first"
        first.commit()
        second.join(30)
        assert polled[0] is not None and polled[0].batch_id == opened
    finally:
        first.close()
        source.close()


def test_a_batch_over_a_tick_already_in_kafka_is_read_from_that_tick(stack, db):
    """An open batch over ticks t1..t3 while Kafka holds the batch t1..t2 whole (a batch opened over
    another's, or opened again differently after a crash lost its opening): the source moves the
    consumer to t2 and relays only the events after it, once."""
    with ticking_queue(db) as name:
        with db.cursor() as cur:
            cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, 'c')", (name,))
            (t1,) = cur.fetchone()
            cur.execute("SELECT pgq.insert_event(%s, 'I', '[1]')", (name,))
            tick(cur, name)
            cur.execute("SELECT last_tick_id FROM pgq.get_queue_info(%s)", (name,))
            (t2,) = cur.fetchone()
            cur.execute("SELECT pgq.insert_event(%s, 'I', '[2]')", (name,))
            tick(cur, name)
            cur.execute("SELECT prev_tick_id, cur_tick_id FROM pgq.next_batch_custom(%s, 'c', NULL, 1, NULL)",
                        (name,))
            prev, t3 = cur.fetchone()
            assert (prev, t3) == (t1, t3) and t3 > t2  # the open batch spans both ticks
            cur.execute("UPDATE pgq.queue SET queue_ticker_paused = false WHERE queue_name = %s", (name,))
        source = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0)
        seen, commits = [], []
        try:
            for item in source.items(Position(t2, 0, True, None, TRIGGER)):
                if isinstance(item, Change):
                    seen.append(item.row)
                elif isinstance(item, Commit) and item.complete:
                    commits.append(item.unit)
                    source.ack(Position(item.unit, item.ordinal, True, None, TRIGGER))
                    break
        finally:
            source.close()
        assert seen == [[2]] and commits == [t3]
        with db.cursor() as cur:
            cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, 'c')", (name,))
            assert cur.fetchone()[0] == t3


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
            cur.execute(pgq_ticker.POLL_SQL, (*pgq_ticker.poll_lock(queue, "c"), pgq_ticker.TICK_MARGIN, queue, "c",
                                              queue))
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
            while (batch := source._poll(False).batch) is not None:
                if len(spans) == 1:  # a restarted relay's first poll gives the open batch, ticks and all
                    again = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0)
                    sources.append(again)
                    assert again._poll(False).batch == batch
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


@pytest.mark.parametrize(("session", "opens_with"), [("off", "local"), ("on", "on"), ("remote_apply", "remote_apply")])
def test_the_poll_that_ticks_commits_its_tick_durably_before_its_batch_is_read(stack, db, session, opens_with):
    """A poll that ticks and opens that tick's batch in one transaction (TICK_POLL_SQL) commits at
    the session's own setting, or with a local WAL flush where that is off: the tick is durable
    before any of its batch reaches Kafka (a tick lost in a crash could give its id to other events)."""
    with ticking_queue(db) as name:
        with db.cursor() as cur:
            cur.execute("SELECT pgq.insert_event(%s, 'I', '[1]')", (name,))
        conn = psycopg2.connect(stack.dsn, options=f"-c synchronous_commit={session}")
        try:
            with conn.cursor() as cur:  # one transaction, as the source's autocommit statement is
                # unpaused only inside it, so no other ticker (pgqd) ticks the queue before the check
                set_paused = "UPDATE pgq.queue SET queue_ticker_paused = %s WHERE queue_name = %s"
                cur.execute(set_paused, (False, name))
                cur.execute(pgq_ticker.TICK_POLL_SQL, (*pgq_ticker.poll_lock(name, "c"), pgq_ticker.tick_name(name),
                                                       name, pgq_ticker.TICK_MARGIN, name, "c", name))
                row = cur.fetchone()
                cur.execute("SHOW synchronous_commit")
                assert cur.fetchone()[0] == opens_with
                cur.execute("SELECT current_setting('application_name')")
                named = cur.fetchone()[0]
                cur.execute(set_paused, (True, name))
            conn.commit()
        finally:
            conn.close()
        with db.cursor() as cur:
            cur.execute("SELECT last_tick_id FROM pgq.get_queue_info(%s)", (name,))
            assert row[2] == cur.fetchone()[0]  # the batch of the tick the same statement made
            assert named == pgq_ticker.tick_name(name) + str(row[2])
            assert row[4] is not None and "pgq.tick" in row[4]  # the batch's pgq.batch_event_sql text


class _Counting(psycopg2.extensions.cursor):
    """A cursor that records the statements it sends (class-wide)."""

    sent: list[str] = []

    def execute(self, query, vars=None):
        _Counting.sent.append(query if isinstance(query, str) else query.as_string(self.connection))
        return super().execute(query, vars)


def test_a_source_that_keeps_up_polls_when_a_tick_is_due_and_takes_three_statements_a_batch(stack, db):
    """Writes arriving faster than the queue's ticks: the source sleeps until the next tick is due
    (each poll says when), then ticks and opens its batch in one statement, reads it in one more
    and acknowledges it in a third; it does not poll in between (at a poll every poll_interval, it
    would poll about ten times a batch here). Every event comes once, in order."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        cur.execute("SELECT pgq.create_queue(%s)", (name,))
        cur.execute("SELECT pgq.set_queue_config(%s, 'ticker_max_lag', '0.25 seconds')", (name,))
        cur.execute("SELECT pgq.register_consumer(%s, 'c')", (name,))
        cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, 'c')", (name,))
        start = cur.fetchone()[0]
    source = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0)
    source._ctl.cursor_factory = source._read.cursor_factory = _Counting
    _Counting.sent = []
    written, seen, batches = 0, [], 0
    deadline = time.monotonic() + 3
    try:
        for item in source.items(Position(start, 0, True, None, TRIGGER)):
            if isinstance(item, Idle):
                if time.monotonic() > deadline:
                    break
                with db.cursor() as cur:  # a write every 20 ms or so, while the source waits
                    cur.execute("SELECT pgq.insert_event(%s, 'I', %s)", (name, f"[{written}]"))
                written += 1
                time.sleep(max(0.0, min(item.wait, 0.02)))
            elif isinstance(item, Change):
                seen.append(item.row)
            elif isinstance(item, Commit) and item.complete:
                source.ack(Position(item.unit, item.ordinal, True, None, TRIGGER))
                batches += 1
    finally:
        source.close()
        with db.cursor() as cur:
            cur.execute("SELECT pgq.unregister_consumer(%s, 'c')", (name,))
            cur.execute("SELECT pgq.drop_queue(%s)", (name,))
    polls = [s for s in _Counting.sent if "next_batch" in s]
    assert batches >= 5
    assert len(polls) <= batches + 3  # a poll a batch, and a few that found nothing to tick or open
    assert len(_Counting.sent) <= 3 * batches + 3
    assert seen == [[i] for i in range(len(seen))] and len(seen) >= written - 20
