"""A Debezium-fed and a pgshovel2-fed JDBC sink make identical target tables (issue #68, "Done when").

One Kafka Connect worker (test_debezium_jdbc_sink's) runs both sides on the same source tables:

- Debezium 3.4.3's PostgresConnector (``pgoutput``, its own slot and publication, ``snapshot.mode=initial``,
  ``skipped.operations=none``, its defaults otherwise: ``decimal.handling.mode=precise``,
  ``time.precision.mode=adaptive``, ``interval.handling.mode=numeric``) -> its topics -> Debezium's
  JDBC sink -> target database A;
- a pgshovel2 set (``envelope: debezium``, Connect schemas; JSON with ``skipped_operations: []`` on the
  trigger, pgoutput and logical paths, Avro on the trigger and pgoutput paths) -> its topics -> the
  same sink -> target B.

In Avro both sides go through Apicurio's AvroConverter and the test registry (Debezium's connector
registering its schemas, pgshovel2's relay registering its own), and the gone table is emptied by
DELETE (pgshovel2 writes ``op: t`` events in JSON only).

Both snapshot the source, then one workload runs on it: inserts, updates, deletes, a composite key's
change, a key change, a TRUNCATE, an UPDATE that leaves a TOASTed text untouched. Every source table is
REPLICA IDENTITY FULL, which the pgshovel2 logical paths need and which lets Debezium's ``pgoutput``
events carry the whole old row. A and B must hold the same tables, the same column types
(``format_type``) and the same rows (each column's text); the table-by-table comparison is printed
(``pytest -s``), with where target A differs from the source. ``24:00:00`` and ±infinity timestamptz,
on which the sink fails for both feeds, are left out: docs/wire.rst, "Consumers".
"""

import time
import uuid

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from pgshovel2 import names
from tests.helpers import caught_up, pgshovel, write_config
from tests.integration.test_debezium_jdbc_sink import (
    COLUMNS,
    SINK_TYPES,
    _converters,
    _failed,
    _types,
    connect_worker,  # noqa: F401 -- a pytest fixture
)

SET = "contrast"
# Types beyond test_debezium_jdbc_sink's COLUMNS that Debezium's postgres connector carries and the sink
# maps (column, type, value of row 1, value of row 2)
MORE_COLUMNS = [
    ("nv", "numeric", "12.345", "-7"),
    ("ch", "char(5)", "'ab'", "NULL"),
    ("vn", "varchar(7)", "'seven'", "''"),
    ("ttz", "timetz", "'12:34:56.789+02'", "'00:00:00Z'"),
    ("x", "xml", "'<a b=\"1\">x</a>'", "NULL"),
    ("ip", "inet", "'192.168.0.1/24'", "'::1'"),
    ("en", "mood", "'happy'", "NULL"),
    ("ci", "citext", "'MiXeD'", "NULL"),
    ("hs", "hstore", "'a=>1, \"b c\"=>NULL'", "''"),
]
TABLES = {  # table -> (columns DDL, ORDER BY of its rows)
    "typed": (None, "id"),
    "pair": ("a int, b text, v text, PRIMARY KEY (a, b)", "a, b"),
    "rekey": ("id int PRIMARY KEY, v text", "id"),
    "gone": ("id int PRIMARY KEY, v text", "id"),
    "toasted": ("id int PRIMARY KEY, big text, small int", "id"),
}
MARK = 1000  # the id (pair: a) of the row the workload's last transaction inserts into every table
BIG = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g)"  # 128 kB, stored out of line


@pytest.fixture
def targets(stack):
    """Two more databases on the test server, dropped afterwards: [(dsn, JDBC URL, user)] * 2."""
    admin = psycopg2.connect(stack.dsn)
    admin.autocommit = True
    params = parse_dsn(stack.dsn)
    made = [f"contrast_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with admin.cursor() as cur:
        for name in made:
            cur.execute(f"CREATE DATABASE {name}")
    yield [(stack.dsn.replace(f"dbname={params['dbname']}", f"dbname={name}"),
            f"jdbc:postgresql://{params['host']}:{params['port']}/{name}", params["user"]) for name in made]
    with admin.cursor() as cur:
        for name in made:
            cur.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def _source(db, schema: str) -> None:
    """The source tables, REPLICA IDENTITY FULL, with their snapshot rows."""
    columns = COLUMNS + MORE_COLUMNS
    with db.cursor() as cur:
        cur.execute(f'CREATE TYPE "{schema}".mood AS ENUM (\'sad\', \'happy\')')
        cur.execute("CREATE EXTENSION IF NOT EXISTS citext")  # as the other tests: public, kept
        cur.execute("CREATE EXTENSION IF NOT EXISTS hstore")
        cur.execute(f'SET search_path = "{schema}", public')
        for table, (ddl, _) in TABLES.items():
            ddl = ddl or "id int PRIMARY KEY, " + ", ".join(f"{c} {t}" for c, t, _, _ in columns)
            cur.execute(f'CREATE TABLE "{schema}".{table} ({ddl})')
            cur.execute(f'ALTER TABLE "{schema}".{table} REPLICA IDENTITY FULL')
        for rid, pos in ((1, 2), (2, 3)):
            cur.execute(f'INSERT INTO "{schema}".typed VALUES ({rid}, {", ".join(c[pos] for c in columns)})')
        cur.execute(f"INSERT INTO \"{schema}\".pair VALUES (1, 'x', 'one'), (2, 'y', 'two'), (2, 'z', 'too')")
        cur.execute(f"INSERT INTO \"{schema}\".rekey VALUES (1, 'a'), (2, 'b')")
        cur.execute(f"INSERT INTO \"{schema}\".gone VALUES (1, 'a'), (2, 'b')")
        cur.execute(f'INSERT INTO "{schema}".toasted VALUES (1, {BIG}, 1), (2, {BIG}, 2)')
        cur.execute("RESET search_path")


def _workload(db, schema: str, truncate: bool = True) -> None:
    """The changes both sides capture, each statement its own transaction, then the marker rows.
    truncate: the gone table is emptied by TRUNCATE, else by DELETE (Avro: pgshovel2 writes op t
    events in JSON only, docs/wire.rst)."""
    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f'SET search_path = {s}, public')
        for statement in (
                f"INSERT INTO {s}.typed (id) VALUES (3)",
                f"INSERT INTO {s}.typed SELECT 4, {', '.join(c for c, _, _, _ in COLUMNS + MORE_COLUMNS)} "
                f"FROM {s}.typed WHERE id = 1",
                f"UPDATE {s}.typed SET tx = 'changed', n = 1.5, j = '[1]', ia = ARRAY[7], nv = 0.5 WHERE id = 1",
                f"DELETE FROM {s}.typed WHERE id = 2",
                # values both sides write alike, and both lossy in the sink (floats' NaN: 0, interval:
                # its µs without the fraction)
                f"INSERT INTO {s}.typed (id, r, dp, n, nv, iv) "
                "VALUES (5, 'NaN', '-Infinity', 'NaN', 'NaN', '1 mon 2 days 00:00:01.5')",
                f"INSERT INTO {s}.typed (id, r, dp, nv, dt, ts, tz) VALUES (6, '-0', 'Infinity', '1e-20', "
                "'0001-01-01 BC', '4713-01-01 00:00:00 BC', '0001-01-01 00:00:00+00')",
                # ±infinity dates and timestamps: Debezium's sentinels, which the sink stores (wrongly)
                # alike for both feeds; not timestamptz: its "infinity" fails the sink for both
                f"INSERT INTO {s}.typed (id, dt, ts) VALUES (7, 'infinity', '-infinity'), "
                "(8, '-infinity', 'infinity')",
                f"UPDATE {s}.pair SET b = 'w', v = 'moved' WHERE a = 1",  # a composite key's change
                f"DELETE FROM {s}.pair WHERE a = 2 AND b = 'y'",
                f"INSERT INTO {s}.pair VALUES (3, 'w', 'three')",
                f"UPDATE {s}.rekey SET id = 10 WHERE id = 1",  # a key change
                f"UPDATE {s}.rekey SET v = 'bb' WHERE id = 2",
                f"TRUNCATE {s}.gone" if truncate else f"DELETE FROM {s}.gone",
                f"INSERT INTO {s}.gone VALUES (5, 'after truncate')",
                f"UPDATE {s}.toasted SET small = 10 WHERE id = 1",  # big: unchanged, TOASTed
                f"UPDATE {s}.toasted SET big = 'short now' WHERE id = 2"):
            cur.execute(statement)
        cur.execute("BEGIN")
        for table in TABLES:
            cur.execute(f"INSERT INTO {s}.{table} ({'a, b' if table == 'pair' else 'id'}) "
                        f"VALUES ({MARK}{', %s' if table == 'pair' else ''})", ("end",) if table == "pair" else ())
        cur.execute("COMMIT")
        cur.execute("RESET search_path")


def _debezium(stack, worker, schema: str, name: str, converters: dict[str, str]) -> None:
    """Register Debezium's PostgresConnector ``name`` (slot, publication and topic prefix ``name``) on
    the source tables; returns once it streams (its slot is active: the snapshot is done)."""
    params = parse_dsn(stack.dsn)
    tables = [f"{schema}.{t}" for t in TABLES]
    qualified = ", ".join(f'"{schema}".{t}' for t in TABLES)
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE {qualified}")
    status, text = worker.rest("POST", "/connectors", {"name": name, "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector", "tasks.max": "1",
        "database.hostname": params["host"], "database.port": params["port"], "database.user": params["user"],
        "database.password": params.get("password", ""), "database.dbname": params["dbname"],
        "topic.prefix": name, "plugin.name": "pgoutput", "slot.name": name, "publication.name": name,
        "publication.autocreate.mode": "disabled", "table.include.list": ",".join(tables),
        "snapshot.mode": "initial", "skipped.operations": "none",
        "topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1",
        # pgshovel2's relays write logical messages (heartbeats) into the WAL (docs/operations.rst)
        "message.prefix.exclude.list": "pgshovel2\\..*",
        # Debezium's headers on a key change's events hold its old/new key as a Struct, which Connect's
        # default SimpleHeaderConverter writes as text the sink reads back as a schemaless map and fails
        # on ("No schema defined for value of map field: __debezium.newkey"); the sink uses no header
        "transforms": "keyheaders", "transforms.keyheaders.type": "org.apache.kafka.connect.transforms.DropHeaders",
        "transforms.keyheaders.headers": "__debezium.oldkey,__debezium.newkey", **converters}})
    assert status < 300, text
    deadline = time.monotonic() + 180
    with conn.cursor() as cur:
        while True:
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,))
            row = cur.fetchone()
            if row and row[0]:
                break
            assert _failed(worker, name) is None, _failed(worker, name)
            assert time.monotonic() < deadline, f"Debezium's connector {name} never streamed"
            time.sleep(1)
    conn.close()


def _drop_debezium(stack, worker, name: str) -> None:
    worker.rest("DELETE", f"/connectors/{name}")
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        for _ in range(120):
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,))
            row = cur.fetchone()
            if not row:
                break
            if not row[0]:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                break
            time.sleep(1)
        cur.execute(f"DROP PUBLICATION IF EXISTS {name}")
    conn.close()


def _sink(worker, name: str, topics: list[str], target: tuple, converters: dict[str, str]) -> None:
    """Register Debezium's JDBC sink with test_debezium_jdbc_sink's settings: topics -> target."""
    _, url, user = target
    status, text = worker.rest("POST", "/connectors", {"name": name, "config": {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "tasks.max": "1",
        "topics": ",".join(topics), "connection.url": url, "connection.username": user,
        "connection.password": "", "insert.mode": "upsert", "delete.enabled": "true", "truncate.enabled": "true",
        "primary.key.mode": "record_key", "schema.evolution": "basic",
        "transforms": "table", "transforms.table.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.table.regex": r"[^.]+\.[^.]+\.(.*)", "transforms.table.replacement": "$1", **converters}})
    assert status < 300, text


def _marked(dsn: str) -> bool:
    """Whether every table of the target holds the workload's marker row (each topic is applied in order,
    so then everything before it is too)."""
    for table, (_, key) in TABLES.items():
        rows = _text_rows(dsn, None, table, key)
        if rows == [("missing",)] or not any(row[0] == str(MARK) for row in rows):
            return False
    return True


def _await_marked(worker, sinks: list[str], dsns: list[str]) -> None:
    deadline = time.monotonic() + 180
    while not all(_marked(dsn) for dsn in dsns):
        for sink in sinks:
            failed = _failed(worker, sink)
            assert failed is None, failed
        if time.monotonic() > deadline:
            pytest.fail(f"the sinks never applied the workload's last transaction: {[_marked(d) for d in dsns]}")
        time.sleep(1)


def _text_rows(dsn: str, schema: str | None, table: str, key: str) -> list[tuple]:
    """The table's rows ordered by key, each column as its text output (exact, and readable where
    psycopg2 is not: infinite or BC dates); [("missing",)] when the table does not exist."""
    qualified = f'"{schema}"."{table}"' if schema else f'"{table}"'
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (qualified,))
            if cur.fetchone()[0] is None:
                return [("missing",)]
            cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                        "AND NOT attisdropped ORDER BY attnum", (qualified,))
            # aliased: ORDER BY key then sorts by the columns, not by their text
            columns = ", ".join(f'"{c}"::text AS c{i}' for i, (c,) in enumerate(cur.fetchall()))
            cur.execute(f"SELECT {columns} FROM {qualified} ORDER BY {key}")
            return cur.fetchall()
    finally:
        conn.close()


def _compare(source_dsn: str, schema: str, a: str, b: str) -> list[str]:
    """Print the table-by-table comparison of targets a (Debezium-fed) and b (pgshovel2-fed); return
    its differences (empty when equal)."""
    differences = []
    for table, (_, key) in TABLES.items():
        types_a, types_b = _types(a, table), _types(b, table)
        rows_a, rows_b = _text_rows(a, None, table, key), _text_rows(b, None, table, key)
        source = _text_rows(source_dsn, schema, table, key)
        print(f"{table}: columns {'equal' if types_a == types_b else 'DIFFER'} ({len(types_a)}), rows "
              f"{'equal' if rows_a == rows_b else 'DIFFER'} ({len(rows_a)}), Debezium-fed target "
              f"{'=' if rows_a == source else '!='} source")
        print(f"  column types (both): {types_a}")
        off: dict[str, tuple] = {}
        for row_a, row_s in zip(rows_a, source, strict=False):
            for c, va, vs in zip(types_a, row_a, row_s, strict=False):
                if va != vs:
                    off.setdefault(c, (row_a[0], vs, va))
        for c, (rid, vs, va) in sorted(off.items()):
            print(f"  Debezium-fed target != source: {c} (row {rid}: source {vs!r}, target {va!r})")
        for column in sorted(set(types_a) | set(types_b)):
            if types_a.get(column) != types_b.get(column):
                differences.append(f"{table}.{column} type: Debezium {types_a.get(column)}, "
                                   f"pgshovel2 {types_b.get(column)}")
        names_a = list(types_a)  # SELECT * order
        for row_a, row_b in zip(rows_a, rows_b, strict=False):
            for column, va, vb in zip(names_a, row_a, row_b, strict=True):
                if va != vb:
                    differences.append(f"{table} row {row_a[0]} {column}: Debezium {va!r}, pgshovel2 {vb!r}")
        if len(rows_a) != len(rows_b):
            differences.append(f"{table}: Debezium {len(rows_a)} rows, pgshovel2 {len(rows_b)}")
    for line in differences:
        print("  " + line)
    return differences


@pytest.mark.parametrize("encoding, path", [("json", "trigger"), ("json", "pgoutput"), ("json", "logical"),
                                            ("avro", "trigger"), ("avro", "pgoutput")])
def test_debezium_and_pgshovel2_fed_sinks_agree(stack, cluster, db, schema, tmp_path, relay_factory,
                                                connect_worker, targets, encoding, path):  # noqa: F811
    _source(db, schema)
    dbz = f"dbz{encoding[0]}{path[0]}{cluster}"
    prefix = f"pgs{encoding[0]}{path[0]}{cluster}"
    extra = {"debezium": {"skipped_operations": []}} if encoding == "json" else {}
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": n} for n in TABLES], encoding=encoding,
                       backend=path, envelope="debezium", topic_prefix=prefix, **extra)
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    relay = relay_factory(SET)
    sinks = [f"jdbc-{dbz}", f"jdbc-{prefix}"]
    converters = _converters(stack, encoding)
    try:
        # Debezium's side registers its schemas (Apicurio's converter as a serializer)
        registering = {f"{side}.converter.apicurio.registry.auto-register": "true" for side in ("key", "value")}
        _debezium(stack, connect_worker, schema, dbz, {**converters, **(registering if converters else {})})
        relay.wait_for("snapshot done")
        _workload(db, schema, truncate=encoding == "json")
        caught_up(stack, cluster, SET)
        for sink, side, target in zip(sinks, (dbz, prefix), targets, strict=True):
            _sink(connect_worker, sink, [names.table_topic(side, schema, t) for t in TABLES], target, converters)
        _await_marked(connect_worker, sinks, [t[0] for t in targets])
        print(f"\n{encoding} {path}: Debezium-fed vs pgshovel2-fed target tables")
        assert _compare(stack.dsn, schema, targets[0][0], targets[1][0]) == []
        # test_debezium_jdbc_sink's SINK_TYPES are the types Debezium's own events make
        debezium_types = _types(targets[0][0], "typed")
        assert {c: debezium_types[c] for c, _, _, _ in COLUMNS} == SINK_TYPES
    finally:
        for sink in sinks:
            connect_worker.rest("DELETE", f"/connectors/{sink}")
        _drop_debezium(stack, connect_worker, dbz)
    assert relay.stop() == 0
