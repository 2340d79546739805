"""Every type of WIRE.md's table round-trips: decode the Kafka message, turn
the decoded value back into SQL by the Avro/JSON spec alone, cast it in
PostgreSQL to the column's type and compare with the stored value."""

import base64
import io
import json
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import names
from pgshovel2.ops.verify import read_topics
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config

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


def _lit(cur, value: str) -> str:
    return cur.mogrify("%s", (value,)).decode()


def avro_sql(cur, value, avro_type, pg_type: str) -> str:
    """SQL expression for a raw Avro value, by the Avro spec (logical types)."""
    if value is None:
        return f"NULL::{pg_type}"
    if isinstance(avro_type, list):
        avro_type = next(t for t in avro_type if t != "null")
    if isinstance(avro_type, dict) and avro_type["type"] == "array":
        items = [avro_sql(cur, v, avro_type["items"], pg_type[:-2]) for v in value]
        return f"ARRAY[{', '.join(items)}]::{pg_type}"
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    base = avro_type["type"] if isinstance(avro_type, dict) else avro_type
    int_max, long_max = 2**31 - 1, 2**63 - 1
    if logical == "date":
        if abs(value) >= int_max:
            return f"'{'' if value > 0 else '-'}infinity'::date"
        return f"('1970-01-01'::date + {value})"
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        kind = "timestamptz" if logical == "timestamp-micros" else "timestamp"
        if abs(value) >= long_max:
            return f"'{'' if value > 0 else '-'}infinity'::{kind}"
        epoch = "'1970-01-01 00:00:00+00'::timestamptz" if kind == "timestamptz" else "'1970-01-01'::timestamp"
        return f"({epoch} + '{value} microseconds'::interval)"
    if logical == "time-micros":
        return f"('00:00'::time + '{value} microseconds'::interval)"
    if logical == "decimal":
        unscaled = int.from_bytes(value, "big", signed=True)
        return f"'{Decimal(unscaled).scaleb(-avro_type['scale'])}'::{pg_type}"
    if base == "bytes":
        return f"'\\x{value.hex()}'::{pg_type}"
    if base in ("float", "double"):
        text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(repr(value), repr(value))
        return f"'{text}'::{pg_type}"
    if base == "boolean":
        return f"{str(value).lower()}::{pg_type}"
    if base in ("int", "long"):
        return f"({value})::{pg_type}"
    return f"{_lit(cur, value)}::{pg_type}"


def json_sql(cur, value, pg_type: str) -> str:
    """SQL expression for a JSON value, by WIRE.md's JSON column."""
    if value is None:
        return f"NULL::{pg_type}"
    if pg_type in ("json", "jsonb"):
        return f"{_lit(cur, json.dumps(value))}::{pg_type}"
    if pg_type.endswith("[]"):
        return f"ARRAY[{', '.join(json_sql(cur, v, pg_type[:-2]) for v in value)}]::{pg_type}"
    if pg_type == "bytea":
        return f"'\\x{base64.b64decode(value).hex()}'::bytea"
    if isinstance(value, bool):
        return f"{str(value).lower()}::{pg_type}"
    if isinstance(value, (int, float)):
        return f"'{value!r}'::{pg_type}"
    return f"{_lit(cur, value)}::{pg_type}"


def compare(db, schema: str, row_id: int, expressions: dict) -> list[str]:
    """Columns whose stored value differs from its decoded expression."""
    bad = []
    with db.cursor() as cur:
        cur.execute(f"SET search_path = \"{schema}\", public")
        for name, pg_type, _ in COLUMNS:
            cast = "jsonb" if pg_type == "json" else pg_type
            cur.execute(f"SELECT {name}::{cast}::text, ({expressions[name]})::{cast}::text, "
                        f"{name}::{cast}::text IS NOT DISTINCT FROM ({expressions[name]})::{cast}::text "
                        f"FROM types WHERE id = %s", (row_id,))
            stored, decoded, same = cur.fetchone()
            if not same:
                bad.append(f"{name} ({pg_type}): stored {stored!r} != decoded {decoded!r}")
        cur.execute("RESET ALL")
    return bad


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_every_type_round_trips(stack, cluster, db, typed_table, tmp_path, encoding, backend):
    schema = typed_table
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "types"}], encoding=encoding,
                       backend=backend)
    pgshovel(stack, cluster, "set", "create", "types", str(cfg))
    relay = RelayProcess(stack, cluster, "types", "--skip-snapshot", log_path=tmp_path / "relay.log")
    try:
        relay.wait_for("skipping the initial snapshot")  # logical: the slot exists from here on
        insert_rows(db, schema)
        caught_up(stack, cluster, "types")
    finally:
        relay.stop()
    topic = names.table_topic("types", schema, "types")
    got = read_topics(stack.bootstrap, [topic])[topic]
    assert len(got) == 3
    registry = SchemaRegistryClient({"url": stack.registry})
    failures = []
    with db.cursor() as cur:
        for _, value, headers in got:
            assert headers["pgshovel.op"] == "c"
            if encoding == "avro":
                writer = json.loads(registry.get_schema(int.from_bytes(value[1:5], "big")).schema_str)
                raw = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(_strip_logical(writer)))
                by_field = {f["pgshovel.column"]: f["type"] for f in writer["fields"]}
                exprs = {n: avro_sql(cur, raw[names.avro_name(n)], by_field[n], t) for n, t, _ in COLUMNS}
                row_id = raw["id"]
            else:
                decoded = json.loads(value)
                exprs = {n: json_sql(cur, decoded[n], t) for n, t, _ in COLUMNS}
                row_id = decoded["id"]
            failures += [f"row {row_id}: {f}" for f in compare(db, schema, row_id, exprs)]
    assert not failures, "\n".join(failures)
