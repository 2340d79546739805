"""The C capture trigger's own insert into a PgQ queue (sql/capture/queue.c): the event row is
the one pgq.insert_event writes (id, time, txid, NULLs) and is in the event table's txid index;
after a rotation, a queue made again under its name or its row moved, a session's next transaction
writes into the queue's current table (what the lookup keeps between transactions,
sql/capture/queue_lookup.c, must not go stale); a writer needs no right on the queue (its own
privileges on the table are enough); a change to a queue that is gone or disabled, or to an
event table of another layout, is refused naming it."""

import uuid

import psycopg2
import pytest

from tests.helpers import capture_into


@pytest.fixture
def queue(db, schema):
    """(queue name, captured table) with pgshovel2.capture on the table; the queue is dropped
    afterwards."""
    name, table = f"q_{schema}", f'"{schema}".t'
    with db.cursor() as cur:
        capture_into(cur, name, table, "id int PRIMARY KEY, v text", "1,2")
    yield name, table
    for attempt in range(5):  # pgqd's maintenance may lock the event tables the other way round
        try:
            with db.cursor() as cur:
                cur.execute("SELECT pgq.drop_queue(%s, true)", (name,))
            return
        except psycopg2.errors.DeadlockDetected:
            if attempt == 4:
                raise


def _current_table(cur, queue: str) -> str:
    cur.execute("SELECT queue_data_pfx || '_' || queue_cur_table FROM pgq.queue WHERE queue_name = %s", (queue,))
    return cur.fetchone()[0]


def _events(cur, table: str) -> list[tuple]:
    cur.execute(f"SELECT ev_id, ev_time, ev_txid, ev_owner, ev_retry, ev_type, ev_data, ev_extra1, ev_extra2, "
                f"ev_extra3, ev_extra4 FROM {table} ORDER BY ev_id")
    return cur.fetchall()


def test_event_rows_equal_what_pgq_insert_event_writes(stack, queue):
    name, table = queue
    conn = psycopg2.connect(stack.dsn)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1, 'a')")
        cur.execute("SELECT pgq.insert_event(%s, 'X', 'by pgq')", (name,))
        cur.execute(f"UPDATE {table} SET id = 2, v = 'b' WHERE id = 1")
        cur.execute("SELECT txid_current(), now()")
        txid, now = cur.fetchone()
    conn.commit()
    with conn.cursor() as cur:
        events = _events(cur, _current_table(cur, name))
        cur.execute("SET enable_seqscan = off")
        cur.execute(f"SELECT count(*) FROM {_current_table(cur, name)} WHERE ev_txid = %s", (txid,))
        by_index = cur.fetchone()[0]
    conn.close()
    assert [e[1:] for e in events] == [
        (now, txid, None, None, "I", '[1,"a"]', "tag", None, None, None),
        (now, txid, None, None, "X", "by pgq", None, None, None, None),
        (now, txid, None, None, "U", '[2,"b"]', "tag", '[1,"a"]', None, None)]
    assert events[0][0] < events[1][0] < events[2][0]  # one sequence, in the order written
    assert by_index == 3


def _write_around(stack, db, table: str, change) -> None:
    """Insert (1, 'a') in a session, run change(cursor of db), then insert (2, 'b') in the same
    session: what it found of the queue in its first transaction must not go stale."""
    writer = psycopg2.connect(stack.dsn)
    try:
        for row, step in (((1, "a"), None), ((2, "b"), change)):
            if step is not None:
                with db.cursor() as cur:
                    step(cur)
            with writer.cursor() as cur:
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", row)
            writer.commit()
    finally:
        writer.close()


@pytest.fixture
def role(stack, db, queue):
    """A login role that may write the captured table, nothing of PgQ; dropped afterwards."""
    name = f"w_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE ROLE {name} LOGIN")
        cur.execute(f"GRANT USAGE ON SCHEMA {queue[1].split('.')[0]} TO {name}")
        cur.execute(f"GRANT SELECT, INSERT, UPDATE ON {queue[1]} TO {name}")
    yield name
    with db.cursor() as cur:
        cur.execute(f"DROP OWNED BY {name}")
        cur.execute(f"DROP ROLE {name}")


def test_a_writer_needs_only_its_table_privileges(stack, db, queue, role):
    """A role that may write the table, and nothing more (no pgq_writer, no right on the queue),
    writes it and its change is captured: the capture trigger appends for every writer."""
    name, table = queue
    conn = psycopg2.connect(stack.dsn.replace("user=postgres", f"user={role}"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_has_role('pgq_writer', 'MEMBER')")
        assert cur.fetchone()[0] is False
        cur.execute(f"INSERT INTO {table} VALUES (2, 'granted')")
    conn.close()
    with db.cursor() as cur:
        cur.execute(f"SELECT id FROM {table}")
        assert cur.fetchall() == [(2,)]
        assert [e[5:7] for e in _events(cur, _current_table(cur, name))] == [("I", '[2,"granted"]')]


def test_an_event_table_of_another_layout_is_refused_and_nothing_changes(stack, db, queue):
    name, table = queue
    with db.cursor() as cur:
        events = _current_table(cur, name)
        cur.execute(f"ALTER TABLE {events} ADD COLUMN ev_extra5 text")
        with pytest.raises(psycopg2.Error) as refused:
            cur.execute(f"INSERT INTO {table} VALUES (1, 'x')")
        assert f'PgQ event table "{events.split(".")[1]}" does not have the columns of pgq.event_template' \
            in str(refused.value)
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchone() == (0,)


def _rotate(cur, queue: str) -> None:
    cur.execute("SELECT pgq.set_queue_config(%s, 'rotation_period', '0')", (queue,))
    cur.execute("SELECT pgq.maint_rotate_tables_step1(%s)", (queue,))
    cur.execute("SELECT pgq.maint_rotate_tables_step2()")


def _recreate(cur, queue: str) -> None:
    cur.execute("SELECT pgq.drop_queue(%s, true)", (queue,))
    cur.execute("SELECT pgq.create_queue(%s)", (queue,))


@pytest.mark.parametrize("change", [_rotate, _recreate], ids=["rotated", "dropped and created again"])
def test_a_session_writes_into_the_current_table_of_its_queue_changed_since(stack, db, queue, change):
    """After a rotation (the queue's row updated) or a new queue of the same name (another row,
    other tables), the session's next transaction writes into the queue's current table."""
    name, table = queue
    with db.cursor() as cur:
        before = _current_table(cur, name)
    _write_around(stack, db, table, lambda cur: change(cur, name))
    with db.cursor() as cur:
        after = _current_table(cur, name)
        assert after != before
        assert [e[6] for e in _events(cur, after)] == ['[2,"b"]']
        if change is _rotate:
            assert [e[6] for e in _events(cur, before)] == ['[1,"a"]']


def test_a_session_finds_its_queue_row_moved_by_updates_and_vacuum(stack, db, queue):
    name, table = queue
    moved = []

    def move(cur):
        cur.execute("SELECT ctid FROM pgq.queue WHERE queue_name = %s", (name,))
        moved.append(cur.fetchone()[0])
        for lag in range(1, 40):  # new versions of the queue's row; the one the session saw is vacuumed away
            cur.execute("SELECT pgq.set_queue_config(%s, 'ticker_max_lag', %s)", (name, f"{lag} seconds"))
        cur.execute("VACUUM pgq.queue")
        cur.execute("SELECT ctid FROM pgq.queue WHERE queue_name = %s", (name,))
        moved.append(cur.fetchone()[0])

    _write_around(stack, db, table, move)
    with db.cursor() as cur:
        assert moved[1] != moved[0]
        assert [e[6] for e in _events(cur, _current_table(cur, name))] == ['[1,"a"]', '[2,"b"]']


@pytest.mark.parametrize("gone", ["dropped", "disabled"])
def test_a_change_to_a_queue_gone_or_disabled_is_refused_naming_it_and_changes_nothing(stack, db, queue, gone):
    name, table = queue
    with db.cursor() as cur:
        if gone == "dropped":
            cur.execute("SELECT pgq.drop_queue(%s, true)", (name,))
        else:
            cur.execute("UPDATE pgq.queue SET queue_disable_insert = true WHERE queue_name = %s", (name,))
    conn = psycopg2.connect(stack.dsn)
    with conn.cursor() as cur, pytest.raises(psycopg2.Error) as refused:
        cur.execute(f"INSERT INTO {table} VALUES (1, 'x')")
    conn.close()
    said = {"dropped": f'PgQ queue "{name}" does not exist',
            "disabled": f'inserts into PgQ queue "{name}" are disabled'}
    assert said[gone] in str(refused.value)
    with db.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchone() == (0,)
        if gone == "dropped":
            cur.execute("SELECT pgq.create_queue(%s)", (name,))  # for the fixture's drop
