"""The C capture trigger keeps its parsed arguments (column list, each column's output function)
per trigger across statements and transactions of a session (sql/capture/capture_args.c): what
DDL changes is seen by the session's next change all the same -- a column's new type, a captured
column dropped, a trigger replaced with other arguments."""

import psycopg2
import pytest

from tests.helpers import capture_into


@pytest.fixture
def captured(stack, db, schema):
    """(queue, table, session): table (id int, v int, w text) captured into queue by pgshovel2.capture
    with columns 1,2,3, and a session that has captured one change already; dropped afterwards."""
    name, table = f"qa_{schema}", f'"{schema}".t'
    with db.cursor() as cur:
        capture_into(cur, name, table, "id int PRIMARY KEY, v int, w text", "1,2,3")
    session = psycopg2.connect(stack.dsn)
    session.autocommit = True
    with session.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1, 10, 'a')")
    yield name, table, session
    session.close()
    with db.cursor() as cur:
        cur.execute("SELECT pgq.drop_queue(%s, true)", (name,))


def _events(cur, queue: str) -> list[str]:
    """The rows of queue's changes (not the DDL records of the capture's event triggers), in order."""
    cur.execute("SELECT queue_data_pfx || '_' || queue_cur_table FROM pgq.queue WHERE queue_name = %s", (queue,))
    cur.execute(f"SELECT ev_data FROM {cur.fetchone()[0]} WHERE ev_type IN ('I', 'U', 'D') ORDER BY ev_id")
    return [row[0] for row in cur.fetchall()]


def test_a_column_whose_type_changed_is_encoded_by_its_new_type(db, captured):
    """Without the extension's DDL event trigger (it re-creates the capture trigger, a new trigger
    OID: not fired in replica mode), the same trigger sees its column's new type."""
    queue, table, session = captured
    with db.cursor() as cur:
        cur.execute("SET session_replication_role = replica")
        cur.execute(f"ALTER TABLE {table} ALTER COLUMN v TYPE numeric(6,2)")
        cur.execute("RESET session_replication_role")
    with session.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (2, 20, 'b')")
    with db.cursor() as cur:
        assert _events(cur, queue) == ['[1,10,"a"]', '[2,"20.00","b"]']


def test_a_captured_column_dropped_is_left_out_of_the_next_change(db, captured):
    """The extension's DDL event trigger replaces the capture trigger without the dropped column, in
    the ALTER's transaction; the session's next change follows (stale arguments would still name it)."""
    queue, table, session = captured
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} DROP COLUMN v")
    with session.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (2, 'b')")
    with db.cursor() as cur:
        assert _events(cur, queue) == ['[1,10,"a"]', '[2,"b"]']


def test_a_trigger_replaced_with_other_columns_captures_those(db, captured):
    queue, table, session = captured
    with db.cursor() as cur:
        cur.execute(f"CREATE OR REPLACE TRIGGER c AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW "
                    f"EXECUTE FUNCTION pgshovel2.capture(%s, 'tag', '1,3', '1', 'all')", (queue,))
    with session.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (2, 20, 'b')")
    with db.cursor() as cur:
        assert _events(cur, queue) == ['[1,10,"a"]', '[2,"b"]']
