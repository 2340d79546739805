"""Debezium's own JDBC sink connector reads the debezium envelope's JSON and Avro topics unchanged
(issue #68).

A Kafka Connect 4.1.1 distributed worker (bench/peer/connect.py's, jars from Maven Central through
scripts/debezium/install.sh) runs ``io.debezium:debezium-connector-jdbc:3.4.3.Final`` with Connect's
JsonConverter (``schemas.enable=true``, Connect's default), or for Avro topics with Apicurio's
AvroConverter on the test stack's registry (Confluent framing: 4-byte ids, no headers), and applies a
set's topics into a second database: upsert, ``delete.enabled``, ``truncate.enabled``, ``primary.key.mode=record_key``,
``schema.evolution=basic`` (the sink creates the tables from the events' Connect schemas). Snapshot
rows, inserts, updates, a change of a composite key, deletes and a TRUNCATE (``op: t`` events,
``debezium: {skipped_operations: []}``; JSON only: Avro has no null key for them, so the Avro run
deletes those rows instead), on the trigger and pgoutput paths: the target tables end
equal to the source, with the column types Debezium's Connect types make.
"""

import time
import uuid
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from bench.peer import connect
from pgshovel2 import names
from tests.helpers import caught_up, pgshovel, write_config
from tests.workers import port_of

SET = "sink"
# (column, type, value of row 1, value of row 2): WIRE.md types with a Connect form the sink maps
COLUMNS = [
    ("s", "smallint", "7", "-32768"),
    ("i", "integer", "2147483647", "NULL"),
    ("bg", "bigint", "-9007199254740993", "0"),
    ("r", "real", "1.5", "-0.25"),
    ("dp", "double precision", "3.141592653589793", "1e-300"),
    ("n", "numeric(10,4)", "123456.7891", "-0.0001"),
    ("bo", "boolean", "true", "false"),
    ("tx", "text", "'O''Brien é 🐘'", "''"),
    ("vc", "varchar(20)", "'short'", "NULL"),
    ("by", "bytea", "'\\x00ff10'::bytea", "''::bytea"),
    ("u", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "NULL"),
    ("dt", "date", "'2024-02-29'", "'1970-01-01'"),
    ("tm", "time", "'23:59:59.999999'", "'00:00:00'"),
    ("ts", "timestamp", "'2024-02-29 12:34:56.789012'", "'1999-12-31 23:59:59'"),
    ("tz", "timestamptz", "'2024-02-29 12:34:56.789012+03'", "NULL"),
    # no months (Debezium's µs keep none) and whole seconds (the sink writes an interval from
    # MicroDuration's µs without the fraction, as it does for Debezium's own events)
    ("iv", "interval", "'3 days 04:05:06'", "'-00:00:01'"),
    ("j", "jsonb", "'{\"a\": [1, null, \"x\"]}'", "'null'"),
    ("ia", "integer[]", "'{1,NULL,3}'", "'{}'"),
    ("ta", "text[]", "'{a,\"b c\",NULL}'", "NULL"),
]
# The column types the sink makes of Debezium's Connect types (PostgreSQL dialect)
SINK_TYPES = {"s": "smallint", "i": "integer", "bg": "bigint", "r": "real", "dp": "double precision",
              "n": "numeric(10,4)", "bo": "boolean", "tx": "text", "vc": "text", "by": "bytea", "u": "uuid",
              "dt": "date", "tm": "time(6) without time zone", "ts": "timestamp(6) without time zone",
              "tz": "timestamp(6) with time zone", "iv": "interval", "j": "json", "ia": "integer[]",
              "ta": "text[]"}


@pytest.fixture(scope="session")
def connect_worker(stack):
    """A Kafka Connect worker with Debezium's JDBC sink on the test stack's broker (127.0.0.1,
    TEST_CONNECT_PORT), read_committed (the relay writes in transactions); stopped at the end."""
    work = Path(stack.env["STACK_DIR"]) / "connect"
    worker = connect.Worker(False, stack.bootstrap, port_of("TEST_CONNECT_PORT"), work,
                            plugins=("jdbc", "apicurio"), preexec=None,
                            extra={"consumer.isolation.level": "read_committed"})
    yield worker
    worker.stop()


@pytest.fixture
def target(stack):
    """A second database on the test server, dropped afterwards: (dsn, JDBC URL, user)."""
    name = f"sink_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(stack.dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    params = parse_dsn(stack.dsn)
    yield (stack.dsn.replace(f"dbname={params['dbname']}", f"dbname={name}"),
           f"jdbc:postgresql://{params['host']}:{params['port']}/{name}", params["user"])
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def _rows(dsn: str, schema: str | None, table: str, key: str) -> list[tuple]:
    qualified = f'"{schema}"."{table}"' if schema else f'"{table}"'
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (qualified,))
            if cur.fetchone()[0] is None:
                return [("missing",)]
            cur.execute(f"SELECT * FROM {qualified} ORDER BY {key}")
            return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in cur.fetchall()]
    finally:
        conn.close()


def _types(dsn: str, table: str) -> dict[str, str]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", (f'"{table}"',))
            return dict(cur.fetchall())
    finally:
        conn.close()


def _failed(worker, name: str) -> str | None:
    status, text = worker.rest("GET", f"/connectors/{name}/status")
    if status == 200 and '"FAILED"' in text:
        return text
    return None


def _await_equal(worker, connector: str, pairs: list[tuple]) -> None:
    """Poll until every (source rows fn, target rows fn) pair agrees (the sink applies asynchronously);
    fail with the connector's trace when it failed, or with the last difference after 180 s."""
    deadline = time.monotonic() + 180
    while True:
        got = [(src(), dst()) for src, dst in pairs]
        if all(a == b for a, b in got):
            return
        failed = _failed(worker, connector)
        assert failed is None, failed
        if time.monotonic() > deadline:
            diff = next((a, b) for a, b in got if a != b)
            pytest.fail(f"the sink's table differs from the source:\nsource {diff[0]}\ntarget {diff[1]}")
        time.sleep(1)


def _converters(stack, encoding: str) -> dict[str, str]:
    """The connector's key/value converter settings: the worker's JsonConverter for JSON; for Avro,
    Apicurio's AvroConverter reading Confluent-framed messages (4-byte content id) from the registry."""
    if encoding == "json":
        return {}
    url = stack.registry.replace("/apis/ccompat/v7", "/apis/registry/v2")
    out = {}
    for side in ("key", "value"):
        out.update({f"{side}.converter": "io.apicurio.registry.utils.converter.AvroConverter",
                    f"{side}.converter.apicurio.registry.url": url,
                    f"{side}.converter.apicurio.registry.as-confluent": "true",
                    f"{side}.converter.apicurio.registry.headers.enabled": "false",
                    f"{side}.converter.apicurio.registry.use-id": "contentId"})
    return out


@pytest.mark.parametrize("encoding, path", [("json", "trigger"), ("json", "pgoutput"), ("avro", "trigger"),
                                            ("avro", "pgoutput")])
def test_jdbc_sink_applies_the_topics(stack, cluster, db, schema, tmp_path, relay_factory, connect_worker,
                                      target, encoding, path):
    cols = ", ".join(f"{c} {t}" for c, t, _, _ in COLUMNS)
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".typed (id int PRIMARY KEY, {cols})')
        cur.execute(f'CREATE TABLE "{schema}".pair (a int, b text, v text, PRIMARY KEY (a, b))')
        cur.execute(f'CREATE TABLE "{schema}".gone (id int PRIMARY KEY, v text)')
        for rid, pos in ((1, 2), (2, 3)):
            cur.execute(f'INSERT INTO "{schema}".typed VALUES ({rid}, {", ".join(c[pos] for c in COLUMNS)})')
        cur.execute(f"INSERT INTO \"{schema}\".pair VALUES (1, 'x', 'one'), (2, 'y', 'two')")
        cur.execute(f"INSERT INTO \"{schema}\".gone VALUES (1, 'a'), (2, 'b')")
    prefix = f"sink{encoding[0]}{path[0]}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": n} for n in ("typed", "pair", "gone")],
                       encoding=encoding, backend=path, envelope="debezium", topic_prefix=prefix,
                       debezium={"skipped_operations": []} if encoding == "json" else {})
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    relay = relay_factory(SET)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".typed (id) VALUES (3)')
        cur.execute(f"UPDATE \"{schema}\".typed SET tx = 'changed', n = 1.5, j = '[1]' WHERE id = 1")
        cur.execute(f'DELETE FROM "{schema}".typed WHERE id = 2')
        cur.execute(f"UPDATE \"{schema}\".pair SET b = 'z', v = 'moved' WHERE a = 1")  # a key change
        cur.execute(f"DELETE FROM \"{schema}\".pair WHERE a = 2")
        cur.execute(f"INSERT INTO \"{schema}\".pair VALUES (3, 'w', 'three')")
        cur.execute(f'{"TRUNCATE" if encoding == "json" else "DELETE FROM"} "{schema}".gone')
        cur.execute(f"INSERT INTO \"{schema}\".gone VALUES (5, 'after truncate')")
    caught_up(stack, cluster, SET)
    topics = [names.table_topic(prefix, schema, n) for n in ("typed", "pair", "gone")]
    dsn, url, user = target
    name = f"jdbc-{prefix}"
    status, text = connect_worker.rest("POST", "/connectors", {"name": name, "config": {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "tasks.max": "1",
        "topics": ",".join(topics), "connection.url": url, "connection.username": user,
        "connection.password": "", "insert.mode": "upsert", "delete.enabled": "true", "truncate.enabled": "true",
        "primary.key.mode": "record_key", "schema.evolution": "basic",
        "transforms": "table", "transforms.table.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.table.regex": r"[^.]+\.[^.]+\.(.*)", "transforms.table.replacement": "$1",
        **_converters(stack, encoding)}})
    assert status < 300, text
    try:
        _await_equal(connect_worker, name, [
            (lambda n=n, k=k: _rows(stack.dsn, schema, n, k), lambda n=n, k=k: _rows(dsn, None, n, k))
            for n, k in (("typed", "id"), ("pair", "a, b"), ("gone", "id"))])
        assert {c: t for c, t in _types(dsn, "typed").items() if c != "id"} == SINK_TYPES
    finally:
        connect_worker.rest("DELETE", f"/connectors/{name}")
    assert relay.stop() == 0
