"""Reading the next PgQ batch ahead (pgshovel2.relay.pgq.ahead) against a real PgQ: the predicted
batch is the one PgQ then opens, with the very text of pgq.batch_event_sql, over merged and
single-tick batches, a transaction that stayed open over many ticks and a table rotation; and a
source that reads ahead relays a backlog of interleaved transactions exactly as one that does not,
item for item (ordinals, order, rows)."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2

from pgshovel2.backends import pgq_ticker
from pgshovel2.relay.pgq.ahead import predict
from pgshovel2.relay.pgq.source import PgqSource
from pgshovel2.relay.source import Commit, Idle
from pgshovel2.setrecord import TriggerCapture
from pgshovel2.wire import TRIGGER, Position


@contextmanager
def queue_with(db, consumers: tuple[str, ...]) -> Iterator[str]:
    """A fresh queue that ticks at every pgq.ticker call, with consumers; dropped afterwards."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        cur.execute("SELECT pgq.create_queue(%s)", (name,))
        # the consumers first, all at the queue's first tick: once it ticks at every call, another
        # test's pgq.ticker() (it ticks every queue) could tick between two registrations
        for consumer in consumers:
            cur.execute("SELECT pgq.register_consumer(%s, %s)", (name, consumer))
        _ticker_config(cur, name, "0")
    try:
        yield name
    finally:
        with db.cursor() as cur:
            for consumer in consumers:
                cur.execute("SELECT pgq.unregister_consumer(%s, %s)", (name, consumer))
            cur.execute("SELECT pgq.drop_queue(%s)", (name,))


def _ticker_config(cur, queue: str, seconds: str) -> None:
    """Tick at every call ("0"), or practically never (no tick but the test's own)."""
    for key in ("ticker_max_lag", "ticker_idle_period"):
        cur.execute("SELECT pgq.set_queue_config(%s, %s, %s)", (queue, key, seconds))


def _insert(cur, queue: str, first: int, count: int) -> None:
    cur.execute("SELECT pgq.insert_event(%s, 'I', format('[%%s]', i)) FROM generate_series(%s, %s) i",
                (queue, first, first + count - 1))


def _open(cur, queue: str, merged: bool, min_count: int) -> tuple | None:
    """(batch_id, prev, cur, pgq.batch_event_sql) of the batch the relay's poll opens, or None."""
    row = None
    if merged:
        cur.execute("SELECT batch_id, prev_tick_id, cur_tick_id FROM pgq.next_batch_custom(%s, 'c', NULL, %s, NULL)",
                    (queue, min_count))
        row = cur.fetchone()
    if row is None or row[0] is None:
        cur.execute("SELECT batch_id, prev_tick_id, cur_tick_id FROM pgq.next_batch_info(%s, 'c')", (queue,))
        row = cur.fetchone()
    if row[0] is None:
        return None
    cur.execute("SELECT pgq.batch_event_sql(%s)", (row[0],))
    return (*row, cur.fetchone()[0])


def test_the_predicted_batch_is_the_one_pgq_opens_with_the_same_sql(stack, db):
    long_txn = psycopg2.connect(stack.dsn)
    try:
        with queue_with(db, ("c",)) as name, db.cursor() as cur:
            with long_txn.cursor() as old:  # open over the first batches and 300 txids
                old.execute("SELECT pgq.insert_event(%s, 'I', '[-1]')", (name,))
            for txn in range(300):
                _insert(cur, name, 10 * txn, 10)
                if txn % 10 == 9:
                    cur.execute("SELECT pgq.ticker(%s)", (name,))
            long_txn.commit()
            cur.execute("SELECT pgq.ticker(%s)", (name,))
            _ticker_config(cur, name, "3600")  # no tick but the test's from here on
            cur.execute("SELECT queue_switch_step1 FROM pgq.queue WHERE queue_name = %s", (name,))
            before_rotation = cur.fetchone()[0]
            compared, listed, rotated = 0, 0, False
            for i in range(1000):
                merged = i % 2 == 0
                cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, 'c')", (name,))
                last = cur.fetchone()[0]
                predicted = predict(cur, name, "c", last, merged, 25)
                opened = _open(cur, name, merged, 25)
                if opened is None:
                    assert predicted is None
                    break
                assert predicted is not None
                assert (predicted.prev_tick, predicted.cur_tick, predicted.batch_sql) == opened[1:]
                compared += 1
                listed += " ev.ev_txid in (" in opened[3]  # the long transaction, read by its txid
                cur.execute("SELECT pgq.finish_batch(%s)", (opened[0],))
                if compared == 4:  # switch to the next event table: later batches read both
                    cur.execute("SELECT pgq.set_queue_config(%s, 'rotation_period', '0')", (name,))
                    cur.execute("SELECT pgq.maint_rotate_tables_step1(%s)", (name,))
                    cur.execute("SELECT pgq.maint_rotate_tables_step2()")
                    cur.execute("SELECT queue_switch_step1 FROM pgq.queue WHERE queue_name = %s", (name,))
                    rotated = cur.fetchone()[0] != before_rotation
            assert compared >= 8 and listed >= 1 and rotated
    finally:
        long_txn.close()


def _drain(source: PgqSource, start: int) -> list:
    """Every item the source gives after tick start, acknowledging each batch as a relay would."""
    items = []
    for item in source.items(Position(start, 0, True, None, TRIGGER)):
        if isinstance(item, Idle):
            if source._open is None:
                return items
            continue
        items.append(item)
        if isinstance(item, Commit) and item.complete:
            source.ack(Position(item.unit, item.ordinal, True, None, TRIGGER))
    return items


def test_a_source_reading_ahead_relays_a_backlog_as_one_that_does_not(stack, db, monkeypatch):
    monkeypatch.setattr(pgq_ticker, "MERGE_COUNT", 60)
    writers = [psycopg2.connect(stack.dsn) for _ in range(3)]
    sources = []
    try:
        with queue_with(db, ("c", "c2")) as name, db.cursor() as cur:
            cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, 'c')", (name,))
            start = cur.fetchone()[0]
            for tick in range(40):  # three writers' transactions interleave and commit out of order
                for i, writer in enumerate(writers):
                    with writer.cursor() as w:
                        _insert(w, name, 1000 * tick + 100 * i, 7 + i)
                writers[(tick + 1) % 3].commit()
                writers[tick % 3].commit()
                cur.execute("SELECT pgq.ticker(%s)", (name,))
            for writer in writers:
                writer.commit()
            cur.execute("SELECT pgq.ticker(%s)", (name,))
            _ticker_config(cur, name, "3600")  # no tick from here on: both read the same ticks
            ahead = PgqSource(stack.dsn, TriggerCapture(name, "t", "c"), maint_interval=0, fetch_size=16)
            plain = PgqSource(stack.dsn, TriggerCapture(name, "t", "c2"), maint_interval=0, fetch_size=16,
                              read_ahead=False)
            sources += [ahead, plain]
            read = _drain(ahead, start)
            assert ahead._ahead.used >= 3  # most batches came from the read-ahead
            assert read == _drain(plain, start)
            assert plain._ahead.used == 0
            assert sum(1 for item in read if isinstance(item, Commit) and item.complete) >= 5
    finally:
        for source in sources:
            source.close()
        for writer in writers:
            writer.close()
