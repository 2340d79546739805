"""An ordinary application schema on every capture path (issue #66): what real databases are full
of must neither be lost silently nor stop a set.

One schema, as an application has it: customers with a stored generated column, citext, text[] and
jsonb (one value nested 5,000 deep); orders range-partitioned by date with a composite key, an enum
and a domain over numeric, partitions created and truncated while relayed, a row moved across
partitions; order items whose numeric and integer columns are widened by ALTER TABLE mid-stream; a
keyless audit log with duplicate rows; TOASTed documents updated without touching their text; hstore
and ltree values. Every path captures the same tables at once (one set each: trigger with C capture,
trigger with PL/pgSQL capture, logical with our decoder, logical with pgoutput on Debian's PG 15; the
PL/pgSQL and pgoutput paths on each stock server), logical tables at REPLICA IDENTITY DEFAULT (the
keyless one FULL). After the workload each set is rebuilt from Kafka by ``pgshovel replicate`` (the
consumer library) into a database of its own and compared with the source table by table, value by
value; ``set verify`` agrees. Then a captured table is dropped: the set goes on.
"""

import subprocess
import time
import uuid

import psycopg2

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import BIN, caught_up, cli_env, pgshovel, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)

TABLES = ("customers", "orders", "order_items", "audit_log", "documents", "misc")
DEEP = "(SELECT repeat('[', 5000) || '1' || repeat(']', 5000))::jsonb"
BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200))"  # 6.4 kB, incompressible

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS citext SCHEMA public;
CREATE EXTENSION IF NOT EXISTS hstore SCHEMA public;
CREATE EXTENSION IF NOT EXISTS ltree SCHEMA public;
CREATE TYPE {s}.order_status AS ENUM ('new', 'paid', 'shipped');
CREATE DOMAIN {s}.amount AS numeric(12,2) CHECK (VALUE >= 0);
CREATE TABLE {s}.customers (id bigint PRIMARY KEY, first text NOT NULL, last text NOT NULL,
    email public.citext, full_name text GENERATED ALWAYS AS (first || ' ' || last) STORED,
    tags text[], prefs jsonb);
CREATE TABLE {s}.orders (id bigint, placed date NOT NULL, customer_id bigint, status {s}.order_status,
    amount {s}.amount, qty int, PRIMARY KEY (id, placed)) PARTITION BY RANGE (placed);
CREATE TABLE {s}.orders_2023 PARTITION OF {s}.orders FOR VALUES FROM ('2023-01-01') TO ('2024-01-01');
CREATE TABLE {s}.orders_2024 PARTITION OF {s}.orders FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE {s}.orders_default PARTITION OF {s}.orders DEFAULT;
CREATE TABLE {s}.order_items (order_id bigint, line int, sku text, qty int, price numeric(12,2),
    PRIMARY KEY (order_id, line));
CREATE TABLE {s}.audit_log (at timestamptz, actor text, action text);
ALTER TABLE {s}.audit_log REPLICA IDENTITY FULL;
CREATE TABLE {s}.documents (id int PRIMARY KEY, body text NOT NULL, price numeric(12,2));
CREATE TABLE {s}.misc (id int PRIMARY KEY, attrs public.hstore, path public.ltree, code public.citext);
INSERT INTO {s}.customers (id, first, last, email, tags, prefs)
    SELECT g, 'f' || g, 'l' || g, 'E' || g || '@Example.com', ARRAY['a', 'b'], '{{"k": 1}}'
    FROM generate_series(1, 20) g;
INSERT INTO {s}.orders SELECT g, date '2023-06-01' + (g * 2), g % 20 + 1, 'new', g, g FROM generate_series(1, 300) g;
INSERT INTO {s}.order_items SELECT g / 3, g % 3, 'sku' || g, g, g * 1.5 FROM generate_series(3, 200) g;
INSERT INTO {s}.audit_log VALUES ('2024-01-01', 'u', 'a1'), ('2024-01-01', 'u', 'a1'),
    ('2024-01-02', 'u', 'a2'), ('2024-01-03', 'v', 'a3');
INSERT INTO {s}.documents SELECT g, {big}, g FROM generate_series(1, 5) g;
INSERT INTO {s}.misc VALUES (1, 'a=>1, b=>NULL', 'top.science.astronomy', 'MiXeD');
"""

WORKLOAD = [
    "INSERT INTO {s}.orders SELECT g, date '2024-03-01', 1, 'paid', 5, 1 FROM generate_series(1001, 1010) g",
    "UPDATE {s}.orders SET qty = qty + 1, status = 'shipped' WHERE id % 7 = 0",
    "UPDATE {s}.orders SET placed = date '2024-02-02' WHERE id = 3",  # moves to orders_2024: a new key
    "DELETE FROM {s}.orders WHERE id % 11 = 0",
    "CREATE TABLE {s}.orders_2026 PARTITION OF {s}.orders FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
    "INSERT INTO {s}.orders VALUES (2001, '2026-05-05', 2, 'new', 7.25, 3)",
    "TRUNCATE {s}.orders_2023",
    "UPDATE {s}.customers SET first = 'Zed' WHERE id = 1",
    "INSERT INTO {s}.customers (id, first, last, prefs) VALUES (21, 'deep', 'json', " + DEEP + ")",
    "UPDATE {s}.documents SET price = 7 WHERE id = 1",  # body unchanged: not in the WAL without FULL
    "DELETE FROM {s}.audit_log WHERE ctid = (SELECT min(ctid) FROM {s}.audit_log WHERE action = 'a1')",
    "UPDATE {s}.audit_log SET actor = 'w' WHERE action = 'a2'",
    "DELETE FROM {s}.audit_log WHERE action = 'a3'",
    "UPDATE {s}.misc SET attrs = attrs || 'c=>3', path = 'top.science', code = 'OTHER' WHERE id = 1",
    "ALTER TABLE {s}.order_items ALTER COLUMN price TYPE numeric(14,2)",
    "ALTER TABLE {s}.order_items ALTER COLUMN qty TYPE bigint",
    "INSERT INTO {s}.order_items VALUES (900, 1, 'wide', 5000000000, 123456789012.34)",
    "UPDATE {s}.order_items SET price = price * 2 WHERE order_id = 5",
]


def _paths(server) -> list[tuple[str, str, dict]]:
    """(label, backend for write_config, extra config) of every capture path server runs."""
    paths = [("pl", "trigger", {"capture": "plpgsql"}), ("pgo", "pgoutput", {})]
    if server.has_our_c:
        paths = [("c", "trigger", {"capture": "c"}), *paths, ("ours", "logical", {"decoder": "pgshovel2"})]
    return paths


def _execute(dsn: str, statements: list[str], schema: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement.format(s=f'"{schema}"', big=BIG))
    finally:
        conn.close()


def _create_sets(stack, cluster: str, schema: str, tmp_path) -> list[str]:  # noqa: F811
    """One set per path over every table; returns the set names. write_config sets REPLICA
    IDENTITY FULL for logical sets: put DEFAULT back (all but the keyless audit_log)."""
    created = []
    for label, backend, extra in _paths(stack):
        tables = [{"schema": schema, "name": t, **({"allow_unkeyed": True} if t == "audit_log" else {})}
                  for t in TABLES]
        cfg = write_config(tmp_path, stack, tables, backend=backend, topic_prefix=f"{label}{cluster}", **extra)
        _execute(stack.dsn, [f"ALTER TABLE {{s}}.{t} REPLICA IDENTITY DEFAULT" for t in TABLES
                                   if t != "audit_log"], schema)
        pgshovel(stack, cluster, "set", "create", f"prod{label}", str(cfg))
        created.append(f"prod{label}")
    return created


def _target_database(target, name: str, schema: str) -> str:
    """A fresh database on the target server with the source's types (a DBA copies the schema's
    types and extensions; replicate creates the tables); returns its DSN."""
    admin = psycopg2.connect(target.dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
    admin.close()
    dsn = target.dsn.replace("dbname=pgshovel", f"dbname={name}")
    _execute(dsn, ["CREATE EXTENSION citext SCHEMA public", "CREATE EXTENSION hstore SCHEMA public",
                   "CREATE EXTENSION ltree SCHEMA public", 'CREATE SCHEMA {s}',
                   "CREATE DOMAIN {s}.amount AS numeric(12,2) CHECK (VALUE >= 0)"], schema)
    return dsn


def _replicate(stack, cluster: str, set_name: str, dsn: str) -> None:  # noqa: F811
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", set_name, "--target", dsn, "--bootstrap", "kafka",
                           "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"replicate {set_name}: {done.stderr[-3000:]}"


def _rows(dsn: str, schema: str, table: str, columns: list[str]) -> list[tuple]:
    """Every row of table as the text of each column, sorted (a multiset)."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cols = ", ".join(f"{names.quote_ident(c)}::text" for c in columns)
            cur.execute(f"SELECT {cols} FROM {names.qualified(schema, table)} ORDER BY 1, 2, 3")
            return cur.fetchall()
    finally:
        conn.close()


def _columns(dsn: str, schema: str, table: str) -> list[str]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                        "AND NOT attisdropped ORDER BY attnum", (names.qualified(schema, table),))
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def _compare(stack, cluster: str, schema: str, set_name: str, dsn: str) -> None:  # noqa: F811
    """Each table of the set on the target equals the source, column by column (the columns the
    set captures: a generated column pgoutput cannot carry before PostgreSQL 18 is left out)."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    for table in record.tables:
        columns = [c.name for c in table.columns]
        assert set(columns) <= set(_columns(stack.admin_dsn, schema, table.name)), (set_name, table.name)
        source = _rows(stack.admin_dsn, schema, table.name, columns)
        replica = _rows(dsn, schema, table.name, columns)
        assert len(source) == len(replica), (set_name, table.name, len(source), len(replica))
        assert source == replica, (set_name, table.name, [r for r in source if r not in replica][:3])


def _wait_dropped(stack, cluster: str, set_name: str, table: str, timeout: float = 60) -> None:  # noqa: F811
    """Wait until the set's record no longer has table (its relay ended it in the set)."""
    deadline = time.monotonic() + timeout
    while True:
        with ClusterStore(stack.zk, cluster) as store:
            record, _ = store.get_set(set_name)
        if table not in {t.name for t in record.tables}:
            return
        assert time.monotonic() < deadline, f"{set_name}: {table} still in the set {timeout:g}s after its DROP"
        time.sleep(1)


def test_an_application_schema_on_every_path(stack, cluster, schema, tmp_path, relay_factory, target):  # noqa: F811
    _execute(stack.dsn, [s for s in SCHEMA.split(";\n") if s.strip()], schema)  # as the application
    sets = _create_sets(stack, cluster, schema, tmp_path)
    relays = [relay_factory(name) for name in sets]
    for relay in relays:
        relay.wait_for("snapshot done", timeout=120)
    _execute(stack.dsn, WORKLOAD, schema)
    for name in sets:
        caught_up(stack, cluster, name, timeout=180)
    for name in sets:
        dsn = _target_database(target, f"r_{name}_{uuid.uuid4().hex[:6]}", schema)
        _replicate(stack, cluster, name, dsn)
        _compare(stack, cluster, schema, name, dsn)
    _execute(stack.dsn, ["DROP TABLE {s}.documents",
                               "UPDATE {s}.customers SET last = 'after drop' WHERE id = 2"], schema)
    for name in sets:  # the set goes on past the DROP, which ends the table (noticed within ~10 s
        _wait_dropped(stack, cluster, name, "documents")  # where no event trigger reports it)
        caught_up(stack, cluster, name, timeout=180)
    for relay in relays:
        assert relay.proc.poll() is None, relay.log()[-3000:]
