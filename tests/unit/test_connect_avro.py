"""The debezium envelope's Avro with Debezium's Connect schemas (pgshovel2.codec.connect_avro): the
Connect schemas of codec.connect as Confluent's AvroConverter registers them, and events written
with them that read back (fastavro, the consumer library's Decoder) to the source values."""

import io
import json
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path

import fastavro

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import connect_avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.connect import row_struct
from pgshovel2.consumer.decode import converter
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context
from pgshovel2.wire import raw_schema

FIXTURE = Path(__file__).parent.parent / "fixtures" / "debezium-3.4.3.Final-postgres.json"
COLS = (Column("id", 1, "smallint", "int2", False, False),
        Column("n", 2, "numeric(10,4)", "numeric", False, True, 10, 4),
        Column("arr", 3, "integer[]", "int4", True, True),
        Column("d", 4, "date", "date", False, True),
        Column("ts", 5, "timestamp", "timestamp", False, True),
        Column("v", 6, "numeric", "numeric", False, True),
        Column("v2", 7, "numeric", "numeric", False, True),
        Column("by", 8, "bytea", "bytea", False, True),
        Column("j", 9, "jsonb", "jsonb", False, True),
        Column("f", 10, "double precision", "float8", False, True))
TABLE = Table("s", "t", COLS, ("id",), "primary key")


def _value_fields(topic: str = "p.s.t") -> dict:
    envelope = connect_avro.value_schema(topic, TABLE)
    after = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    return {f["name"]: f for f in after["fields"]}


def test_fields_are_as_avroconverter_writes_debeziums():
    f = _value_fields()
    assert f["id"] == {"name": "id", "type": {"type": "int", "connect.type": "int16"}}
    assert f["arr"] == {"name": "arr", "type": ["null", {"type": "array", "items": ["null", "int"]}], "default": None}
    assert f["n"] == {"name": "n", "default": None, "type": ["null", {
        "type": "bytes", "scale": 4, "precision": 10, "connect.version": 1,
        "connect.parameters": {"scale": "4", "connect.decimal.precision": "10"},
        "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}]}
    assert f["d"]["type"] == ["null", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}]
    assert f["ts"]["type"][1] == {"type": "long", "connect.version": 1,
                                  "connect.name": "io.debezium.time.MicroTimestamp"}
    assert f["j"]["type"][1] == {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"}
    # VariableScaleDecimal: defined once, then referenced by its full name
    assert f["v"]["type"][1]["connect.name"] == "io.debezium.data.VariableScaleDecimal"
    assert f["v2"]["type"] == ["null", "io.debezium.data.VariableScaleDecimal"]


def test_records_are_named_by_the_connect_names():
    envelope = connect_avro.value_schema("p.s.t", TABLE)
    assert (envelope["namespace"], envelope["name"], envelope["connect.name"], envelope["connect.version"]) == \
           ("p.s.t", "Envelope", "p.s.t.Envelope", 2)
    before, after = envelope["fields"][:2]
    assert before["type"][1]["connect.name"] == "p.s.t.Value" and after["type"] == ["null", "p.s.t.Value"]
    key = connect_avro.key_schema("p.s.t", TABLE)
    assert key == {"type": "record", "name": "Key", "namespace": "p.s.t", "connect.name": "p.s.t.Key",
                   "fields": [{"name": "id", "type": {"type": "int", "connect.type": "int16"}}]}
    fastavro.parse_schema(envelope)
    fastavro.parse_schema(key)


def test_debeziums_own_envelope_translates_as_ours():
    """Debezium's recorded Connect schema (the fixture) and ours give the same Avro source and
    transaction blocks (the Enum snapshot with its default first: ["string", "null"])."""
    fixture = json.loads(FIXTURE.read_text())
    event = next(m for m in fixture["topics"]["dbzfix.dbzfix.a"] if m["value"] is not None)
    theirs = connect_avro.avro_schema(event["value"]["schema"])
    ours = connect_avro.value_schema("dbzfix.dbzfix.a", Table("dbzfix", "a", (
        Column("id", 1, "integer", "int4", False, False), Column("v", 2, "text", "text", False, True)), ("id",), "pk"))
    by_name = {f["name"]: f for f in theirs["fields"]}
    assert by_name["source"]["type"]["fields"][4] == {"name": "snapshot", "default": "false", "type": [{
        "type": "string", "connect.version": 1,
        "connect.parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,"
                                          "incremental"},
        "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"]}
    ours_by_name = {f["name"]: f for f in ours["fields"]}
    assert ours_by_name["transaction"] == by_name["transaction"]
    assert ours_by_name["before"] == by_name["before"] and ours_by_name["op"] == by_name["op"]
    assert [f for f in ours_by_name["source"]["type"]["fields"] if f["name"] != "position"] == \
           by_name["source"]["type"]["fields"]


def _envelope() -> DebeziumEnvelope:
    key_w = AvroWriter(connect_avro.key_schema("p.s.t", TABLE), 1)
    env_w = AvroWriter(connect_avro.value_schema("p.s.t", TABLE), 2)
    enc = connect_avro.encoder(TABLE, "p.s.t", key_w)
    return DebeziumEnvelope(enc, SourceInfo("set", "db", "s", "t"), "p.s.t", env_w, clock=lambda: 10**18)


def test_event_values_are_debeziums_and_read_back():
    env = _envelope()
    # 2024-02-29: 8825 days since 2000 (trigger form); 12:34:56.789012 that day
    row = [5, "-1.5000", {"dims": [2, 2], "lower_bounds": [1, 1], "elements": [1, 2, None, 4]}, 8825,
           762525296789012, "1.50", None, "00ff", '{"a": 1}', "-Infinity"]
    [msg] = env.change("I", row, None, Context(7, "pos", 1000))
    assert msg.key[:5] == b"\x00\x00\x00\x00\x01" and msg.value[:5] == b"\x00\x00\x00\x00\x02"
    key = fastavro.schemaless_reader(io.BytesIO(msg.key[5:]), fastavro.parse_schema(env.encoder._key_writer.schema))
    assert key == {"id": 5}
    writer = env._writer.schema
    raw = fastavro.schemaless_reader(io.BytesIO(msg.value[5:]), fastavro.parse_schema(raw_schema(writer)))
    assert raw["after"] == {"id": 5, "n": (-15000).to_bytes(2, "big", signed=True), "arr": [1, 2, None, 4],
                            "d": 19782, "ts": 1709210096789012, "v": {"scale": 1, "value": b"\x0f"}, "v2": None,
                            "by": b"\x00\xff", "j": '{"a": 1}', "f": float("-inf")}
    assert raw["op"] == "c" and raw["source"]["position"] == "pos"
    read = converter(writer)(raw)["after"]
    assert (read["n"], read["d"], read["ts"], read["v"]) == \
           (Decimal("-1.5000"), date(2024, 2, 29), datetime(2024, 2, 29, 12, 34, 56, 789012), Decimal("1.50"))


def test_microtime_and_microduration_read_back():
    schema = {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTime"}
    assert converter(schema)(45296500000) == time(12, 34, 56, 500000)
    duration = {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroDuration"}
    assert converter({"type": "array", "items": ["null", duration]})([3_600_500_000, None]) == ["PT1H0.5S", None]


def test_added_columns_keep_older_rows_readable():
    """A column added with a DEFAULT (Column.default) carries it where the Connect value is the Avro
    form it is kept in, else is optional: the new schema reads rows written before (a registry's
    BACKWARD check refused the relay's schema of ADD COLUMN d int NOT NULL DEFAULT 7)."""
    old_cols = (Column("id", 1, "integer", "int4", False, False),)
    new_cols = old_cols + (Column("d", 2, "integer", "int4", False, False, default=7),
                           Column("tz", 3, "timestamp with time zone", "timestamptz", False, False, default=0),
                           Column("plain", 4, "text", "text", False, True))
    old = Table("s", "t", old_cols, ("id",), "primary key")
    new = Table("s", "t", new_cols, ("id",), "primary key")
    fields = {f["field"]: f for f in row_struct("p.s.t.Value", new_cols, True)["fields"]}
    assert fields["d"] == {"type": "int32", "optional": False, "default": 7, "field": "d"}
    assert fields["tz"]["optional"] is True and "default" not in fields["tz"]
    writer = fastavro.parse_schema(raw_schema(connect_avro.value_schema("p.s.t", old)))
    reader = fastavro.parse_schema(raw_schema(connect_avro.value_schema("p.s.t", new)))
    buf = io.BytesIO()
    event = {"before": None, "after": {"id": 1}, "source": None, "transaction": None, "op": "c", "ts_ms": 1,
             "ts_us": None, "ts_ns": None}
    source = {"version": "v", "connector": "pgshovel", "name": "n", "ts_ms": 1, "snapshot": "false", "db": "d",
              "sequence": None, "ts_us": None, "ts_ns": None, "schema": "s", "table": "t", "txId": None, "lsn": None,
              "xmin": None, "position": "p"}
    fastavro.schemaless_writer(buf, writer, {**event, "source": source})
    read = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), writer, reader)
    assert read["after"] == {"id": 1, "d": 7, "tz": None, "plain": None}
