"""The text forms of `pgshovel tail` (pgshovel2.consumer.render): JSON lines, and the pretty
block rendered from message bytes made by the relay's own encoders (both encodings, both
envelopes), with column names and PostgreSQL's text of every value."""

import datetime as dt
import json

import click
import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.config import SetConfig, TableConfig
from pgshovel2.consumer import Change, ConsumerError, Decoder, Transaction
from pgshovel2.consumer.render import Pretty, change_json, ident, iso_ms, jsonable, literal
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, TxnOrder
from pgshovel2.setrecord import SetRecord
from tests.unit.test_consumer_decode import RAW, Schemas, decoder
from tests.unit.test_consumer_decode import avro as avro_value


def test_json_lines_use_the_json_encodings_forms():
    value = decoder().decode(avro_value(RAW), "v") | {"f": float("nan")}
    change = Change("p.public.t", "public.t", "u", {"id": 1}, value, 5, "00000000000000000001:0000000000",
                    1_763_632_800_123, 0, 3)
    line = json.loads(change_json(change))
    assert line == {"txid": 5, "position": "00000000000000000001:0000000000", "ts_ms": 1_763_632_800_123,
                    "table": "public.t", "op": "u", "key": {"id": 1},
                    "value": {"id": 1, "d": "2022-01-08", "ts": "2023-11-14T22:13:20.123456Z",
                              "lts": "1970-01-01T00:00:00", "n": "123.45",
                              "u": "0b7e8c36-4c36-4a1f-9f5a-2b0f4a6a3c11", "b": "AP8=",
                              "ds": ["1970-01-01", None, "infinity"], "f": "NaN"}}


def test_iso_and_jsonable_edges():
    assert iso_ms(1) == "1970-01-01T00:00:00.001Z"
    assert jsonable({"a": [float("inf"), -float("inf"), 1.5, dt.time(1, 2)]}) == {"a": ["Infinity", "-Infinity",
                                                                                        1.5, "01:02:00"]}


def test_identifiers_and_literals_as_sql_writes_them():
    assert [ident(n) for n in ("id", "a_b$1", "Mixed", "person.name/sur", 'q"x', "1st", "naïve")] == \
        ["id", "a_b$1", '"Mixed"', '"person.name/sur"', '"q""x"', '"1st"', '"naïve"']
    assert literal("O'Brien é") == "'O''Brien é'"
    assert literal("a\nb\t'\\\x01") == "E'a\\nb\\t\\'\\\\\\x01'"


# A table with odd column names and a value of most kinds; rows in the capture trigger's forms.
TABLE = Table("Sch", "Odd.Table", (
    Column("id", 1, "integer", "int4", False, False),
    Column("person.name/sur", 2, "text", "text", False, True),
    Column("Mixed Case", 3, "boolean", "bool", False, True),
    Column("r", 4, "real", "float4", False, True),
    Column("1st", 5, "double precision", "float8", False, True),
    Column('with"quote', 6, "numeric(12,4)", "numeric", False, True, 12, 4),
    Column("d", 7, "date", "date", False, True),
    Column("tz", 8, "timestamp with time zone", "timestamptz", False, True),
    Column("iv", 9, "interval", "interval", False, True),
    Column("j", 10, "jsonb", "jsonb", False, True),
    Column("ia", 11, "integer[]", "int4", True, True),
    Column("b", 12, "bytea", "bytea", False, True),
    Column("tt", 13, "time with time zone", "timetz", False, True),
), ("id",), "primary key")
ROW1 = [1, "O'Brien", False, 3.4028234663852886e+38, 0.1, "-0.0100", 8825, 762_525_296_500_000, [14, 3, 14_706_500_000],
        '{"a": [1, null]}', "{1,NULL,3}", "00ff00", "12:34:56.5+03"]
ROW1B = [1, "line1\nline2", True, 1e6, 1e15, "12.5000", 2**31 - 1, -(2**63), [0, -1, 7_200_000_000], "[]", "{}",
         "", "00:00:00-05:30"]
ROW2 = [2] + [None] * 12
SHOWN1 = ("{id: 1, \"person.name/sur\": 'O''Brien', \"Mixed Case\": f, r: 3.4028235e+38, \"1st\": 0.1, "
          "\"with\"\"quote\": -0.0100, d: '2024-02-29', tz: '2024-02-29 12:34:56.5+00', "
          "iv: '1 year 2 mons 3 days 04:05:06.5', j: '{\"a\": [1, null]}', ia: '{1,NULL,3}', b: '\\x00ff00', "
          "tt: '12:34:56.5+03'}")
SHOWN1B = ("{id: 1, \"person.name/sur\": E'line1\\nline2', \"Mixed Case\": t, r: 1e+06, \"1st\": 1e+15, "
           "\"with\"\"quote\": 12.5000, d: 'infinity', tz: '-infinity', iv: '-1 days +02:00:00', j: '[]', "
           "ia: '{}', b: '\\x', tt: '00:00:00-05:30'}")
SHOWN2 = ("{id: 2, \"person.name/sur\": NULL, \"Mixed Case\": NULL, r: NULL, \"1st\": NULL, \"with\"\"quote\": NULL, "
          "d: NULL, tz: NULL, iv: NULL, j: NULL, ia: NULL, b: NULL, tt: NULL}")
TOPIC = "myset.Sch.Odd_x2eTable"
def set_record(encoding: str = "avro", envelope: str = "row", tables: tuple = (TABLE,)) -> SetRecord:
    """A set record "myset" of tables (its topic prefix is the set name)."""
    config = SetConfig(dsn="dbname=d", tables=tuple(TableConfig(t.schema, t.name) for t in tables),
                       encoding=encoding, envelope=envelope)
    return SetRecord.new("c", "myset", config, tables)


RECORD = set_record()


def envelope(encoding: str, kind: str):
    """(the table's envelope as the relay builds it, a Decoder whose registry knows its schemas)."""
    use_avro = encoding == "avro"
    value_schema = (avro.debezium_value_schema if kind == "debezium" else avro.value_schema)("myset", TABLE)
    key_schema = avro.key_schema("myset", TABLE)
    key_w, value_w = (AvroWriter(key_schema, 8), AvroWriter(value_schema, 7)) if use_avro else (None, None)
    enc = RowEncoder(TABLE, use_avro, key_w, None if kind == "debezium" else value_w)
    env = DebeziumEnvelope(enc, SourceInfo("myset", "db", TABLE.schema, TABLE.name), TOPIC, value_w) \
        if kind == "debezium" else RowEnvelope(enc)
    return env, Decoder(registry=Schemas({7: value_schema, 8: key_schema}))


def transactions(encoding: str, kind: str) -> tuple[list[Transaction], Pretty]:
    """A snapshot chunk of ROW1 and one transaction (insert ROW2, update ROW1 -> ROW1B, delete ROW2, truncate)."""
    env, dec = envelope(encoding, kind)
    ctx = Context(77, "p", 0, "false", TxnOrder())
    messages = [*env.change("I", ROW2, None, ctx), *env.change("U", ROW1B, ROW1, ctx),
                *env.change("D", ROW2, None, ctx)]
    changes = [Change(TOPIC, "Sch.Odd.Table", m.op, m.key, m.value, 77, "p", 0, 0, i) for i, m in enumerate(messages)]
    changes.append(Change(TOPIC, "Sch.Odd.Table", "t", None, None, 77, "p", 0, 0, 99))
    snap = env.read(ROW1, Context(0, "s", 0, "true"))[0]
    chunk = Transaction(0, "s", 0, [Change(TOPIC, "Sch.Odd.Table", "r", snap.key, snap.value, 0, "s", 0, 0, 0)],
                        snapshot=True)
    return [chunk, Transaction(77, "p", 1_763_632_800_123, changes)], Pretty(set_record(encoding, kind), dec)


def lines(encoding: str, kind: str) -> list[str]:
    txns, pretty = transactions(encoding, kind)
    return [click.unstyle(line) for txn in txns for line in pretty.lines(txn)]


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_pretty_row_envelope(encoding):
    assert lines(encoding, "row") == [
        "SNAPSHOT (1 row, 1970-01-01T00:00:00.000Z)", f"  r Sch.Odd.Table {{id: 1}} -> {SHOWN1}", "END SNAPSHOT",
        "BEGIN txid 77 (4 changes, 2025-11-20T10:00:00.123Z)",
        f"  c Sch.Odd.Table {{id: 2}} -> {SHOWN2}",
        f"  u Sch.Odd.Table {{id: 1}} -> {SHOWN1B}",
        "  d Sch.Odd.Table {id: 2}",
        "  t Sch.Odd.Table",
        "COMMIT"]


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_pretty_debezium_envelope_shows_before_and_after(encoding):
    assert lines(encoding, "debezium")[3:] == [
        "BEGIN txid 77 (5 changes, 2025-11-20T10:00:00.123Z)",
        f"  c Sch.Odd.Table {{id: 2}} -> {SHOWN2}",
        f"  u Sch.Odd.Table {{id: 1}} before {SHOWN1} -> {SHOWN1B}",
        f"  d Sch.Odd.Table {{id: 2}} before {SHOWN2}",
        "  d Sch.Odd.Table {id: 2}",  # the tombstone after a delete event
        "  t Sch.Odd.Table",
        "COMMIT"]
    assert lines(encoding, "debezium")[1] == f"  r Sch.Odd.Table {{id: 1}} -> {SHOWN1}"


def test_columns_the_set_record_lacks_fall_back_to_the_message():
    (chunk, _), pretty = transactions("json", "row")
    pretty = Pretty(set_record(tables=()), pretty.decoder)
    shown = click.unstyle(list(pretty.lines(chunk))[1])
    # without kinds: numbers, booleans and strings as carried (the real's JSON number as a double)
    assert shown.startswith("  r Sch.Odd.Table {id: 1} -> {id: 1, \"person.name/sur\": 'O''Brien', "
                            "\"Mixed Case\": f, r: 3.4028234663852886e+38, \"1st\": 0.1, \"with\"\"quote\": '-0.0100'")


def test_long_values_are_cut_and_garbage_is_named():
    env, dec = envelope("avro", "row")
    (msg,) = env.read([3, "x" * 100] + [None] * 11, Context(0, "s", 0, "true"))
    line = Pretty(RECORD, dec).change_line(Change(TOPIC, "Sch.Odd.Table", "r", msg.key, msg.value, 0, "s",
                                                           0, 2, 41))
    assert f"\"person.name/sur\": '{'x' * 59}…'," in click.unstyle(line)
    bad = Change(TOPIC, "Sch.Odd.Table", "c", b"\x00\x00\x00\x00\x08\x02", b"{not json", 5, "p", 0, 2, 42)
    with pytest.raises(ConsumerError, match=r"the value of 'myset.Sch.Odd_x2eTable' \[2\] offset 42"):
        Pretty(RECORD, dec).change_line(bad)


def test_json_values_and_arrays_render_as_the_json_encoding_writes_them():
    from pgshovel2.consumer import JsonValue
    from pgshovel2.consumer.pgtext import jsonb_text

    value = {"j": JsonValue("null"), "n": None, "a": {"lower_bounds": [0], "elements": [[-0.0, None]]}}
    assert json.dumps(jsonable(value)) == \
        '{"j": {"pgshovel.json": "null"}, "n": null, "a": {"lower_bounds": [0], "elements": [[-0.0, null]]}}'
    assert jsonb_text(JsonValue("null")) == "null" and jsonb_text([JsonValue("[1, 2]"), None]) == "[[1, 2], null]"
