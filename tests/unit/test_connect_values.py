"""Column values and schemas of the debezium envelope's JSON with Connect schemas
(pgshovel2.codec.connect) against the forms Debezium 3.4's PostgreSQL connector writes with its
defaults (decimal.handling.mode=precise, time.precision.mode=adaptive, interval.handling.mode=numeric,
binary.handling.mode=bytes), each expected value worked out by hand from Debezium's documentation and
checked against Debezium's own events (tests/fixtures/debezium-3.4.3.Final-postgres.json, ``typed``;
tests/integration/test_debezium_recorded.py compares whole events)."""

import json

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.connect import ConnectRowEncoder, envelope_schema, java_bytes, table_schemas

# (column, trigger form, Debezium's payload value, Debezium's Connect field schema without optional/field)
CASES = [
    (Column("s", 0, "smallint", "int2", False, True), 7, 7, {"type": "int16"}),
    (Column("i", 0, "integer", "int4", False, True), 7, 7, {"type": "int32"}),
    (Column("b", 0, "bigint", "int8", False, True), 2**40, 2**40, {"type": "int64"}),
    (Column("r", 0, "real", "float4", False, True), 1.5, 1.5, {"type": "float"}),
    (Column("n", 0, "numeric(10,4)", "numeric", False, True, 10, 4), "1.5000", "Opg=",
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "4", "connect.decimal.precision": "10"}}),
    (Column("neg", 0, "numeric(5,2)", "numeric", False, True, 5, 2), "-1.28", "gA==",  # -128: one byte
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "2", "connect.decimal.precision": "5"}}),
    (Column("nan", 0, "numeric(5,2)", "numeric", False, True, 5, 2), "NaN", None,
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "2", "connect.decimal.precision": "5"}}),
    # the fraction's trailing zeros dropped, as recorded from Debezium (tests/fixtures, typed.vn)
    (Column("v", 0, "numeric", "numeric", False, True), "1.5000", {"scale": 1, "value": "Dw=="},
     {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "scale"},
                                   {"type": "bytes", "optional": False, "field": "value"}],
      "name": "io.debezium.data.VariableScaleDecimal", "version": 1, "doc": "Variable scaled decimal"}),
    (Column("m", 0, "money", "money", False, True), "$1,234.56", "AeJA",
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1, "parameters": {"scale": "2"}}),
    (Column("by", 0, "bytea", "bytea", False, True), "00ff", "AP8=", {"type": "bytes"}),
    (Column("u", 0, "uuid", "uuid", False, True), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", {"type": "string", "name": "io.debezium.data.Uuid", "version": 1}),
    (Column("j", 0, "jsonb", "jsonb", False, True), '{"a": 1}', '{"a": 1}',
     {"type": "string", "name": "io.debezium.data.Json", "version": 1}),
    # 2024-02-29: 19782 days since 1970, 8825 since 2000 (the trigger's form)
    (Column("d", 0, "date", "date", False, True), 8825, 19782,
     {"type": "int32", "name": "io.debezium.time.Date", "version": 1}),
    # ±infinity: Debezium's own numbers (PgJDBC's sentinels as it converts them; the contrast test's)
    (Column("dinf", 0, "date", "date", False, True), 2**31 - 1, -2147472692,
     {"type": "int32", "name": "io.debezium.time.Date", "version": 1}),
    (Column("tsinf", 0, "timestamp", "timestamp", False, True), -2**63, -9223372036832400000,
     {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    (Column("t", 0, "time", "time", False, True), 45296500000, 45296500000,
     {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}),
    (Column("tz", 0, "time with time zone", "timetz", False, True), "12:34:56.5+03", "09:34:56.5Z",
     {"type": "string", "name": "io.debezium.time.ZonedTime", "version": 1}),
    (Column("ts", 0, "timestamp", "timestamp", False, True), 762525296789012, 1709210096789012,
     {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    (Column("tstz", 0, "timestamptz", "timestamptz", False, True), 762525296789012, "2024-02-29T12:34:56.789012Z",
     {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    # 1 mon 2 days 3.5 s: a month is 30.4375 days in Debezium's MicroDuration
    (Column("iv", 0, "interval", "interval", False, True), [1, 2, 3500000],
     30_4375 * 86_400_000_000 // 10_000 + 2 * 86_400_000_000 + 3_500_000,
     {"type": "int64", "name": "io.debezium.time.MicroDuration", "version": 1}),
    (Column("t3", 0, "time(3) without time zone", "time", False, True), 45296789000, 45296789,
     {"type": "int32", "name": "io.debezium.time.Time", "version": 1}),
    (Column("ts3", 0, "timestamp(3) without time zone", "timestamp", False, True), 762525296789000, 1709210096789,
     {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}),
    (Column("bt", 0, "bit(3)", "bit", False, True), "001", "AQ==",
     {"type": "bytes", "name": "io.debezium.data.Bits", "version": 1, "parameters": {"length": "3"}}),
    (Column("vb", 0, "bit varying(20)", "varbit", False, True), "1011001110", "zgI=",
     {"type": "bytes", "name": "io.debezium.data.Bits", "version": 1, "parameters": {"length": "20"}}),
    (Column("pt", 0, "point", "point", False, True), "(1.5,-2)",
     {"x": 1.5, "y": -2.0, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAADA", "srid": None}, {
         "type": "struct", "fields": [{"type": "double", "optional": False, "field": "x"},
                                      {"type": "double", "optional": False, "field": "y"},
                                      {"type": "bytes", "optional": True, "field": "wkb"},
                                      {"type": "int32", "optional": True, "field": "srid"}],
         "name": "io.debezium.data.geometry.Point", "version": 1, "doc": "Geometry (POINT)"}),
    (Column("na", 0, "numeric(5,2)[]", "numeric", True, True), "{1.50,-2.00}", ["AJY=", "/zg="],
     {"type": "array", "items": {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                                 "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "5"}}}),
    (Column("arr", 0, "integer[]", "int4", True, True), [1, None, 3], [1, None, 3],
     {"type": "array", "items": {"type": "int32", "optional": True}}),
    (Column("darr", 0, "date[]", "date", True, True), "{2024-02-29,NULL}", [19782, None],
     {"type": "array", "items": {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1}}),
]


def _table(columns) -> Table:
    return Table("s", "t", tuple(Column(c.name, i + 1, *vars_of(c)) for i, c in enumerate(columns)), (), "")


def vars_of(c: Column) -> tuple:
    return (c.pg_type, c.kind, c.is_array, c.nullable, c.precision, c.scale)


@pytest.mark.parametrize("col,trigger,expected,schema", CASES, ids=[c[0].name for c in CASES])
def test_value_and_schema_are_debeziums(col, trigger, expected, schema):
    table = _table([col])
    encoder = ConnectRowEncoder(table, table_schemas("p.s.t", table))
    assert encoder.value_datum(encoder.convert([trigger])) == {col.name: expected}
    after = next(f for f in envelope_schema("p.s.t", table)["fields"] if f["field"] == "after")
    assert after["name"] == "p.s.t.Value" and after["optional"] is True
    field = after["fields"][0]
    assert field == {**{k: v for k, v in schema.items() if k in ("type", "fields", "items")}, "optional": True,
                     **{k: v for k, v in schema.items() if k not in ("type", "fields", "items")}, "field": col.name}
    assert list(field) == [k for k in ("type", "fields", "items", "optional", "name", "version", "doc",
                                       "parameters", "field") if k in field]  # JsonConverter's order


def test_java_bytes_is_biginteger_to_byte_array():
    assert [java_bytes(n).hex() for n in (0, 1, 127, 128, -1, -128, -129, 255)] == \
           ["00", "01", "7f", "0080", "ff", "80", "ff7f", "00ff"]


def test_key_message_has_the_key_schema():
    cols = (Column("id", 1, "smallint", "int2", False, False), Column("v", 2, "text", "text", False, True))
    table = Table("s", "t", cols, ("id",), "primary key")
    encoder = ConnectRowEncoder(table, table_schemas("p.s.t", table))
    assert json.loads(encoder.key(encoder.convert([5, "x"]))) == {
        "schema": {"type": "struct", "fields": [{"type": "int16", "optional": False, "field": "id"}],
                   "optional": False, "name": "p.s.t.Key"},
        "payload": {"id": 5}}


def test_multidimensional_array_goes_flat():
    """Debezium's array has one dimension: a 2-D value goes as its elements in storage order
    (it used to stop the relay with an EncodeError)."""
    col = Column("arr", 1, "integer[]", "int4", True, True)
    table = _table([col])
    encoder = ConnectRowEncoder(table, table_schemas("p.s.t", table))
    assert encoder.convert([{"dims": [2, 2], "lower_bounds": [1, 1], "elements": [1, 2, 3, None]}]) == [[1, 2, 3, None]]
    assert encoder.convert(["{{1,2},{3,4}}"]) == [[1, 2, 3, 4]]  # the text form of older queued rows


def test_lower_bound_not_1_keeps_the_elements():
    col = Column("arr", 1, "integer[]", "int4", True, True)
    table = _table([col])
    encoder = ConnectRowEncoder(table, table_schemas("p.s.t", table))
    assert encoder.convert([{"dims": [2], "lower_bounds": [0], "elements": [1, 2]}]) == [[1, 2]]
