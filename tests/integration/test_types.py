"""Every type of WIRE.md's table round-trips: decode the Kafka message, turn
the decoded value back into SQL by the Avro/JSON spec alone, cast it in
PostgreSQL to the column's type and compare with the stored value. Also the
special values (multi-dimensional and bounded arrays, -0/NaN/±Infinity, the
JSON literal null) and a sweep over every type a column can have (pg_type).
"""

import datetime as dt
import io
import json
import math

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import JsonValue, SetReader
from pgshovel2.ops.verify import read_topics
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config
from tests.integration.sweep_types import OWN_TYPES, describe, sweep_columns
from tests.integration.type_decoding import Col, avro_sql, compare, json_sql, named_types

COLUMNS = [  # (name, type, [values as SQL literals])
    ("b", "boolean", ["true", "false"]),
    ("i2", "smallint", ["-32768", "32767"]),
    ("i4", "integer", ["2147483647", "-1"]),
    ("i8", "bigint", ["-9223372036854775808", "9223372036854775807"]),
    ("o", "oid", ["4294967295", "0"]),
    ("f4", "real", ["0.1", "'NaN'"]),
    ("f8", "double precision", ["0.30000000000000004", "'-Infinity'"]),
    ("nc", "numeric(12,4)", ["-12345678.1234", "0"]),
    ("nu", "numeric", ["1.000000000000000000000000000001", "'NaN'"]),
    ("m", "money", ["-1234.56", "0.01"]),
    ("t", "text", ["E'h\\u00e9llo \\U0001F418\\n\\t\"\\\\'", "''"]),
    ("vc", "varchar(10)", ["'ünï'", "'x'"]),
    ("ch", "char(5)", ["'ab'", "'abcde'"]),
    ("nm", "name", ["'a name'", "'b'"]),
    ("ci", "citext", ["'MiXeD'", "'x'"]),
    ("by", "bytea", ["'\\x00ff00'::bytea", "''::bytea"]),
    ("u", "uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"]),
    ("d", "date", ["'2024-02-29'", "'0044-03-15 BC'"]),
    ("d2", "date", ["'infinity'", "'-infinity'"]),
    ("tm", "time", ["'23:59:59.999999'", "'00:00'"]),
    ("tz", "timetz", ["'12:34:56.789+05:30'", "'00:00:00-03'"]),
    ("ts", "timestamp", ["'2024-02-29 12:34:56.123456'", "'infinity'"]),
    ("tst", "timestamptz", ["'1999-12-31 23:59:59.999999+03'", "'-infinity'"]),
    ("tsbc", "timestamptz", ["'0044-03-15 12:00:00+00 BC'", "'10000-01-01 00:00:00+00'"]),
    ("iv", "interval", ["'1 year 2 mons -3 days 04:05:06.789'", "'-1 day -00:00:00.000001'"]),
    ("js", "json", ["'{\"a\": [1, \"x\", null]}'", "'\"s\"'"]),
    ("jb", "jsonb", ["'{\"k\": {\"n\": 1.5}}'", "'[]'"]),
    ("ai", "integer[]", ["'{1,NULL,3}'", "'{}'"]),
    ("at", "text[]", ["'{\"a b\",\"c,d\",NULL,\"q\\\"\"}'", "'{}'"]),
    ("ats", "timestamptz[]", ["'{\"2024-01-01 00:00:00+00\",NULL}'", "'{}'"]),
    ("aiv", "interval[]", ["'{\"1 day 02:00:00\",NULL,\"-1 mons\"}'", "'{}'"]),
    ("atz", "timetz[]", ["'{\"12:00:00+05:30\"}'", "'{}'"]),
    ("aby", "bytea[]", ["ARRAY['\\x00ff'::bytea, NULL]", "'{}'"]),
    ("en", "mood", ["'happy'", "'sad'"]),
    ("ip", "inet", ["'192.168.0.1/24'", "'::1'"]),
    ("ma", "macaddr", ["'08:00:2b:01:02:03'", "'00:00:00:00:00:00'"]),
    ("rg", "int4range", ["'[1,10)'", "'empty'"]),
    ("pt", "point", ["'(1.5,-2)'", "'(0,0)'"]),
    ("hs", "hstore", ["'a=>1, b=>NULL'", "''"]),
    ("x", "xml", ["'<a b=\"1\">t</a>'", "'<z/>'"]),
    ("tv", "tsvector", ["'fat:2 cat:3'", "''"]),
    ("bt", "bit(4)", ["B'1010'", "B'0000'"]),
    ("lsn", "pg_lsn", ["'16/B374D848'", "'0/0'"]),
    ("dm", "posint", ["42", "1"]),
    ("dn", "price", ["123.45", "0.00"]),
]


@pytest.fixture
def typed_table(db, schema):
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore")
        cur.execute(f"SET search_path = \"{schema}\", public")
        cur.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
        cur.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
        cur.execute("CREATE DOMAIN price AS numeric(7,2)")
        cols = ", ".join(f"{n} {t}" for n, t, _ in COLUMNS)
        cur.execute(f"CREATE TABLE types (id int PRIMARY KEY, {cols})")
        cur.execute("SET search_path = public")
    return schema


def insert_rows(db, schema: str) -> None:
    with db.cursor() as cur:
        cur.execute(f"SET search_path = \"{schema}\", public")
        cur.execute("SET datestyle = 'SQL, DMY'; SET intervalstyle = 'sql_standard'; "
                    "SET extra_float_digits = 0; SET bytea_output = 'escape'; SET timezone = 'Asia/Kolkata'")
        for row in range(2):
            values = ", ".join(vals[row] for _, _, vals in COLUMNS)
            cur.execute(f"INSERT INTO types VALUES ({row + 1}, {values})")
        cur.execute("INSERT INTO types (id) VALUES (3)")  # all NULL
        cur.execute("RESET ALL")


def _strip_logical(schema):
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical(s) for s in schema]
    return schema


def table_cols(cur, schema: str, table: str) -> list[Col]:
    """The decoders' view of a table's columns except id, from the catalog."""
    cur.execute("SELECT attname, atttypid, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped AND attname <> 'id' "
                "ORDER BY attnum", (f'"{schema}"."{table}"',))
    return [describe(cur, name, oid, pg_type, False) for name, oid, pg_type in cur.fetchall()]


def relay_rows(stack, cluster, db, tmp_path, set_name: str, tables: list[dict], write, **config) -> None:
    """Create the set, start its relay without a snapshot, run write(), wait until it is relayed."""
    cfg = write_config(tmp_path, stack, tables, **config)
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay = RelayProcess(stack, cluster, set_name, "--skip-snapshot", log_path=tmp_path / "relay.log")
    try:
        relay.wait_for("skipping the initial snapshot")  # logical: the slot exists from here on
        write()
        caught_up(stack, cluster, set_name)
    finally:
        relay.stop()


def decoded_rows(stack, cur, topic: str, cols: list[Col], envelope: str = "row") -> list[tuple]:
    """[(key, row id, {column: SQL of the decoded value})] of the topic's data messages (not
    tombstones), decoded by the wire spec (Avro without logical types, or JSON)."""
    registry = SchemaRegistryClient({"url": stack.registry})
    out = []
    for key, value, headers in read_topics(stack.bootstrap, [topic])[topic]:
        if value is None:
            continue
        assert headers["pgshovel.op"] == "c"
        if value[:1] == b"\x00":
            writer = json.loads(registry.get_schema(int.from_bytes(value[1:5], "big")).schema_str)
            row = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(_strip_logical(writer)))
            if envelope == "debezium":
                writer = next(f for f in writer["fields"] if f["name"] == "before")["type"][1]
                row = row["after"]
            named = named_types(writer)
            by_field = {f["pgshovel.column"]: f["type"] for f in writer["fields"]}
            exprs = {c.name: avro_sql(cur, row[names.avro_name(c.name)], by_field[c.name], c, named) for c in cols}
        else:
            row = json.loads(value)
            row = row["after"] if envelope == "debezium" else row
            exprs = {c.name: json_sql(cur, row[c.name], c) for c in cols}
        out.append((key, row["id"], exprs))
    return out


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_every_type_round_trips(stack, cluster, db, typed_table, tmp_path, encoding, backend):
    schema = typed_table
    relay_rows(stack, cluster, db, tmp_path, "types", [{"schema": schema, "name": "types"}],
               lambda: insert_rows(db, schema), encoding=encoding, backend=backend)
    with db.cursor() as cur:
        cols = table_cols(cur, schema, "types")
        got = decoded_rows(stack, cur, names.table_topic("types", schema, "types"), cols)
    assert len(got) == 3
    failures = []
    for _, row_id, exprs in got:
        failures += [f"row {row_id}: {f}" for f in compare(db, schema, "types", row_id, cols, exprs)]
    assert not failures, "\n".join(failures)


SPECIAL = [  # (name, type, [values of rows 1-4 as SQL]); row 5 is all NULL
    ("f4", "real", ["'-0'", "'NaN'", "'Infinity'", "'-Infinity'"]),
    ("f8", "double precision", ["'-0'", "'NaN'", "'Infinity'", "'-Infinity'"]),
    ("af4", "real[]", ["'{-0,NaN,Infinity,-Infinity,0.1,NULL}'", "'{{-0,1},{NaN,NULL}}'",
                       "'[0:1]={-0,-Infinity}'", "'{}'"]),
    ("af8", "double precision[]", ["ARRAY['-0', 'NaN', 'Infinity', '-Infinity', NULL, 0.30000000000000004]::float8[]",
                                   "'[-1:0][1:2]={{-0,1},{2,3}}'", "'{{{-0}}}'", "'{}'"]),
    ("ai", "integer[]", ["'{{1,2},{3,4}}'", "'[0:1]={1,2}'", "'{}'", "'[2:2][3:3][4:5]={{{1,NULL}}}'"]),
    ("ai6", "integer[]", ["'{{{{{{1,2}}}}}}'", "'{{{{{{NULL}}}}}}'", "'[1:1]={5}'",
                          "'[0:0][0:0][0:0][0:0][0:0][0:1]={{{{{{1,2}}}}}}'"]),
    ("at", "text[]", ["'{{\"a,b\",NULL},{\"\",\"NULL\"}}'", "'[0:0]={\"x y\"}'", "'{}'", "'{{\"}\"}}'"]),
    ("ad", "date[]", ["'{{2024-02-29,infinity},{-infinity,NULL}}'", "'[0:1]={2000-01-01,0044-03-15 BC}'",
                      "'{}'", "'{{{2024-01-01}}}'"]),
    ("ats", "timestamptz[]", ["'{{\"2024-01-01 00:00:00.000001+00\"},{NULL}}'", "'[7:7]={infinity}'",
                              "'{}'", "'{-infinity}'"]),
    ("aiv", "interval[]", ["'{{1 day,-1 mon},{NULL,00:00:01.5}}'", "'[0:0]={1 year}'", "'{}'",
                           "'{{{\"-1 day -00:00:00.000001\"}}}'"]),
    ("aby", "bytea[]", ["ARRAY[['\\x00'::bytea, NULL], ['\\xff'::bytea, ''::bytea]]", "'[5:5]={\"\\\\x0a\"}'", "'{}'",
                        "'{NULL}'"]),
    ("ab", "boolean[]", ["'{{t,f},{NULL,t}}'", "'[0:0]={t}'", "'{}'", "'{t}'"]),
    ("an", "numeric(10,2)[]", ["'{{1.5,NULL}}'", "'[0:0]={-2.25}'", "'{}'", "'{0}'"]),
    ("js", "json", ["'null'", "'{\"pgshovel.json\": \"x\"}'", "'[null]'", "'\"null\"'"]),
    ("jb", "jsonb", ["'null'", "'[{\"pgshovel.json\": 1}]'", "'{}'", "'0'"]),
    ("ajb", "jsonb[]", ["'{\"null\",NULL,\"[1,2]\"}'", "'{{\"null\",\"[]\"},{\"{}\",NULL}}'",
                        "'[0:0]={\"null\"}'", "'{}'"]),  # unquoted, null is NULL
    ("aj", "json[]", ["ARRAY['null'::json, NULL]", "ARRAY['{\"pgshovel.json\": \"null\"}'::json]", "'{}'",
                      "ARRAY[ARRAY['[[]]'::json]]"]),
]
ARRAY_KEYS = [("'{1,2}'", [1, 2]), ("'{{1,2},{3,4}}'", [[1, 2], [3, 4]]), ("'[0:1]={1,2}'", [1, 2]),
              ("'{}'", [])]  # (stored key, its Kafka key: lower bounds are not part of keys)


@pytest.mark.parametrize("envelope", ["row", "debezium"])
@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_special_values_round_trip(stack, cluster, db, schema, tmp_path, encoding, envelope, backend):
    """Multi-dimensional, empty and bounded arrays, -0/NaN/±Infinity (also as elements), the JSON
    literal null apart from SQL NULL: decoded by docs/wire.rst alone, they are the stored values.
    Array keys are the key values without their lower bounds."""
    with db.cursor() as cur:
        cols = ", ".join(f"{n} {t}" for n, t, _ in SPECIAL)
        cur.execute(f'CREATE TABLE "{schema}".vals (id int PRIMARY KEY, {cols}); '
                    f'CREATE TABLE "{schema}".vk (k int[] PRIMARY KEY, id int)')

    def write():
        with db.cursor() as cur:
            for row in range(4):
                values = ", ".join(vals[row] for _, _, vals in SPECIAL)
                cur.execute(f'INSERT INTO "{schema}".vals VALUES ({row + 1}, {values})')
                cur.execute(f'INSERT INTO "{schema}".vk VALUES ({ARRAY_KEYS[row][0]}, {row + 1})')
            cur.execute(f'INSERT INTO "{schema}".vals (id) VALUES (5)')

    # debezium: the schemaless form (pgshovel2's own values), exact for every value (Debezium's
    # Connect forms have no multi-dimensional arrays or NaN numerics: docs/wire.rst)
    extra = {"debezium": {"schemas": False}} if envelope == "debezium" else {}
    relay_rows(stack, cluster, db, tmp_path, "vals", [{"schema": schema, "name": "vals"},
                                                      {"schema": schema, "name": "vk"}],
               write, encoding=encoding, backend=backend, envelope=envelope, topic_prefix=f"vals{cluster}", **extra)
    failures = []
    with db.cursor() as cur:
        cols = table_cols(cur, schema, "vals")
        got = decoded_rows(stack, cur, names.table_topic(f"vals{cluster}", schema, "vals"), cols, envelope)
        assert sorted(row_id for _, row_id, _ in got) == [1, 2, 3, 4, 5]
        for _, row_id, exprs in got:
            failures += [f"row {row_id}: {f}" for f in compare(db, schema, "vals", row_id, cols, exprs)]
        key_col = [Col("k", "integer[]", elem="integer")]
        registry = SchemaRegistryClient({"url": stack.registry})
        for key, row_id, exprs in decoded_rows(stack, cur, names.table_topic(f"vals{cluster}", schema, "vk"), key_col,
                                               envelope):
            failures += [f"vk row {row_id}: {f}" for f in compare(db, schema, "vk", row_id, key_col, exprs)]
            if encoding == "json":
                decoded_key = json.loads(key)
            else:
                writer = json.loads(registry.get_schema(int.from_bytes(key[1:5], "big")).schema_str)
                decoded_key = fastavro.schemaless_reader(io.BytesIO(key[5:]), fastavro.parse_schema(writer))
            if decoded_key != {"k": ARRAY_KEYS[row_id - 1][1]}:
                failures.append(f"vk row {row_id}: key {decoded_key} != {ARRAY_KEYS[row_id - 1][1]}")
    if envelope == "row":
        failures += consumer_reads_back(stack, cluster, encoding)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_every_pg_type_reaches_kafka(stack, cluster, db, schema, tmp_path, encoding, backend):
    """A column of every type pg_type has for columns (base, enum, domain, range, multirange,
    composite, and arrays of each, 2-D with a NULL), one value each: it reaches Kafka and decodes
    back to the stored value."""
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore")
        cur.execute(f'SET search_path = "{schema}", public')
        cur.execute(OWN_TYPES)
        cols, values, skipped = sweep_columns(cur, schema)
        cur.execute("CREATE TABLE sweep (id int PRIMARY KEY, " + ", ".join(f"{c.name} {c.pg_type}" for c in cols) + ")")
        cur.execute("RESET ALL")
    assert len(cols) > 150 and set(skipped) <= {"gtsvector", "ghstore", "pg_brin_bloom_summary",
                                                "pg_brin_minmax_multi_summary"}

    def write():
        with db.cursor() as cur:
            cur.execute(f'SET search_path = "{schema}", public')
            cur.execute("INSERT INTO sweep VALUES (1, " + ", ".join(values[c.name] for c in cols) + ")")
            cur.execute("RESET ALL")

    relay_rows(stack, cluster, db, tmp_path, "sweep", [{"schema": schema, "name": "sweep"}], write,
               encoding=encoding, backend=backend)
    with db.cursor() as cur:
        got = decoded_rows(stack, cur, names.table_topic("sweep", schema, "sweep"), cols)
    assert [row_id for _, row_id, _ in got] == [1]
    failures = compare(db, schema, "sweep", 1, cols, got[0][2])
    assert not failures, "\n".join(failures)


def consumer_reads_back(stack, cluster: str, encoding: str) -> list[str]:
    """What the consumer library (pgshovel2.consumer) gives for some of test_special_values' rows."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, "vals", stack.bootstrap, stack.registry)
    with reader:
        values = {c.value["id"]: c.value for t in reader.transactions(until_caught_up=True) for c in t.changes
                  if c.table.endswith(".vals")}
    json_null = JsonValue("null") if encoding == "json" else "null"  # Avro carries the JSON text
    expected = {(1, "js"): json_null, (1, "jb"): json_null, (5, "js"): None, (5, "jb"): None,
                (2, "ai"): {"lower_bounds": [0], "elements": [1, 2]}, (1, "ai"): [[1, 2], [3, 4]],
                (2, "ad"): {"lower_bounds": [0], "elements": ["2000-01-01", "0044-03-15 BC"] if encoding == "json"
                            else [dt.date(2000, 1, 1), -735160]}}  # Avro: a BC date stays the raw number
    bad = [f"consumer: row {i} {c} = {values[i][c]!r}, expected {v!r}" for (i, c), v in expected.items()
           if values[i][c] != v]
    signs = [math.copysign(1, values[1]["f8"]), math.copysign(1, values[1]["af4"][0])]
    return bad + ([f"consumer: -0 read as {signs}"] if signs != [-1, -1] else [])
