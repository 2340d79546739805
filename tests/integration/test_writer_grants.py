"""The application's writers need nothing of pgshovel2 (issue #66): a role holding exactly what an
application has on its tables (USAGE on the schema, SELECT/INSERT/UPDATE/DELETE/TRUNCATE on the
table) and what ``set create --print-grants`` says writers need (nothing more), writes a captured
table on every capture path and server, and every change reaches Kafka. It cannot reach the
set's queue functions itself (no event no change made)."""

import uuid

import psycopg2
import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import assert_verified, caught_up, pgshovel, verify, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


def _paths(server) -> list[tuple[str, dict]]:
    paths = [("trigger", {"capture": "plpgsql"}), ("pgoutput", {})]
    if server.has_our_c:
        paths += [("trigger", {"capture": "c"}), ("logical", {"decoder": "pgshovel2"})]
    return paths


@pytest.fixture
def writer(stack, schema):  # noqa: F811
    """A LOGIN role with an application's privileges on the schema's tables and nothing else;
    (name, connect(dsn) -> autocommit connection as it)."""
    name = f"w{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(stack.admin_dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE ROLE {name} LOGIN; GRANT USAGE ON SCHEMA "{schema}" TO {name}')
    yield name
    with admin.cursor() as cur:
        cur.execute(f"DROP OWNED BY {name}; DROP ROLE {name}")
    admin.close()


def _as(stack, role: str):  # noqa: F811
    conn = psycopg2.connect(stack.admin_dsn.replace("user=postgres", f"user={role}"))
    conn.autocommit = True
    return conn


def test_writers_need_only_their_table_privileges(stack, cluster, db, schema, tmp_path, relay_factory,  # noqa: F811
                                                  writer):
    for i, (backend, extra) in enumerate(_paths(stack)):
        name, table = f"wg{i}", names.qualified(schema, f"t{i}")
        with db.cursor() as cur:
            cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            cur.execute(f"INSERT INTO {table} VALUES (1, 'one')")
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": f"t{i}"}], backend=backend,
                           topic_prefix=f"{name}{cluster}", **extra)
        grants = pgshovel(stack, cluster, "set", "create", "--print-grants", str(cfg)).stdout
        assert "the roles that write these tables need no grant for pgshovel2" in grants, grants
        assert "pgq_writer TO" not in grants.replace("never grant them pgq_writer", "")
        pgshovel(stack, cluster, "set", "create", name, str(cfg))
        with db.cursor() as cur:
            cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON {table} TO {writer}")
        relay = relay_factory(name)
        relay.wait_for("snapshot done")
        conn = _as(stack, writer)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table} VALUES (2, 'two'), (3, 'three')")
            cur.execute(f"UPDATE {table} SET v = 'uno' WHERE id = 1")
            cur.execute(f"DELETE FROM {table} WHERE id = 3")
            cur.execute(f"TRUNCATE {table}")
            cur.execute(f"INSERT INTO {table} VALUES (4, 'four')")
            _cannot_append(cur, stack, cluster, name)
        conn.close()
        caught_up(stack, cluster, name)
        assert_verified(verify(stack, cluster, name))
        assert relay.stop() == 0


def _cannot_append(cur, stack, cluster: str, set_name: str) -> None:  # noqa: F811
    """The writer can call none of the functions that append to a trigger set's queue."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    queue = getattr(record.capture, "queue", None)
    if queue is None:
        return
    cur.execute("SELECT p.oid::regprocedure::text, has_schema_privilege(n.oid, 'USAGE') "
                "AND has_function_privilege(p.oid, 'EXECUTE') FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE (n.nspname = 'pgq' AND p.proname LIKE 'insert_event%%') "
                "OR (n.nspname = 'pgshovel2_pl' AND p.proname ~ '^q[0-9]+$')")
    rows = cur.fetchall()
    assert rows, "no queue function found"
    for function, callable_ in rows:
        assert callable_ is False, f"the writer may call {function}"
