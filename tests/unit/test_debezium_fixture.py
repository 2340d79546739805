"""Our debezium envelope against real Debezium 3.4.3 PostgreSQL events.

tests/fixtures/debezium-3.4.3.Final-postgres.json was recorded from Debezium itself
(scripts/debezium/capture_fixture.py: Kafka Connect + debezium-connector-postgres from Maven
Central, pgoutput, transaction metadata on, JsonConverter with schemas) over two tables: a
snapshot, then three transactions, with test_decoding's view of the same WAL. The same
snapshot rows and WAL changes are run through our emitter and envelope, and every message is
compared with Debezium's: field names and order, JSON value types, and the values of every
field that does not depend on configuration or wall-clock time (source.lsn, sequence, txId,
ts_ms/ts_us/ts_ns, snapshot markers, transaction id and orders, before/after, keys,
tombstones). The Avro schema is compared with what Confluent's AvroConverter makes of
Debezium's Connect schema. The differences docs/wire.rst documents are asserted as such.
"""

import io
import json
import re
from datetime import datetime
from pathlib import Path

import fastavro
import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.connect import ConnectRowEncoder, table_schemas
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.envelopes import SnapshotMarks
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.source import Change
from pgshovel2.wire import Lsn

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "debezium-3.4.3.Final-postgres.json")
                     .read_text(encoding="utf-8"))
SCHEMA = "dbzfix"
TOPICS = {name: f"dbzfix.dbzfix.{name}" for name in ("a", "b")}
TABLES = {name: Table(SCHEMA, name, (Column("id", 1, "integer", "int4", False, False),
                                     Column("v", 2, "text", "text", False, True)), ("id",), "primary key")
          for name in TOPICS}
SNAPSHOT_ROWS = {"a": [[1, "one"], [2, "two"], [3, "three"]], "b": [[1, "b one"], [2, "b two"]]}
# Debezium's snapshot took the typed table (its events: tests/integration/test_debezium_recorded.py)
# after a and b; it stands in here by its keys, so that the snapshot markers fall where Debezium's did
TYPED = Table(SCHEMA, "typed", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key")
# Debezium's snapshot: at its slot's consistent point, source.ts_ms its transaction's start
_FIRST_SOURCE = FIXTURE["topics"]["dbzfix.dbzfix.a"][0]["value"]["payload"]["source"]
SNAPSHOT_LSN, SNAPSHOT_TS_MS = _FIRST_SOURCE["lsn"], _FIRST_SOURCE["ts_ms"]
# pgshovel-only field, documented in docs/wire.rst
EXTRA_SOURCE_FIELDS = ["position"]
_TD_CHANGE = re.compile(r"^table (\w+)\.(\w+): (INSERT|UPDATE|DELETE): (.*)$")
_TD_COLUMN = re.compile(r"(\w+)\[([^\]]+)\]:('(?:[^']|'')*'|\S+)")


class RecordingSink:
    def __init__(self):
        self.produced: list[tuple] = []

    def produce(self, topic, key, value, headers):
        self.produced.append((topic, key, value, dict(headers)))


def _row(text: str) -> list:
    """A test_decoding tuple as our trigger row form (int4 a number, text a string)."""
    values = []
    for _, kind, value in _TD_COLUMN.findall(text):
        values.append(int(value) if kind == "integer" else value[1:-1].replace("''", "'"))
    return values


def wal_transactions() -> list[dict]:
    """The fixture's transactions as test_decoding saw them: xid, commit time (µs), end LSN and
    changes (op, table, row, old row, change LSN)."""
    out: list[dict] = []
    for rec in FIXTURE["wal"]:
        data, lsn = rec["data"], int(Lsn.parse(rec["lsn"]))
        if data.startswith("BEGIN"):
            out.append({"xid": int(rec["xid"]), "changes": []})
        elif data.startswith("COMMIT"):
            at = datetime.fromisoformat(data.split("(at ")[1].rstrip(")").replace("+00", "+00:00"))
            out[-1]["ts_us"] = int(at.timestamp()) * 1_000_000 + at.microsecond
            out[-1]["end_lsn"] = lsn  # test_decoding reports a COMMIT at the end of its record
        else:
            _, table, op, cols = _TD_CHANGE.match(data).groups()
            if op == "UPDATE":
                old, new = cols.removeprefix("old-key: ").split(" new-tuple: ")
                change = ("U", table, _row(new), _row(old))
            else:
                change = (op[0], table, _row(cols), None)
            out[-1]["changes"].append((*change, lsn))
    return out


def ours(use_avro: bool, connect: bool = False) -> tuple[dict[str, list], dict]:
    """Our messages per topic for the fixture's snapshot and transactions, and the schemas by topic
    (Avro: as registered). connect: JSON with Connect schemas (keys and values as decoded, whole)."""
    sink, routes, schemas = RecordingSink(), {}, {}
    for name, table in TABLES.items():
        env_w = key_w = None
        if use_avro:
            schemas[TOPICS[name]] = avro.debezium_value_schema("dbzfix", table)
            env_w, key_w = AvroWriter(schemas[TOPICS[name]], 1), AvroWriter(avro.key_schema("dbzfix", table), 2)
        encoder = ConnectRowEncoder(table, table_schemas(TOPICS[name], table)) if connect else \
            RowEncoder(table, use_avro, key_w, None)
        envelope = DebeziumEnvelope(encoder, SourceInfo("dbzfix", "pgshovel", SCHEMA, name), TOPICS[name], env_w)
        routes[table.qualified] = TableRoute(table, TOPICS[name], encoder, envelope)
    typed_encoder = RowEncoder(TYPED, False, None, None)
    routes[TYPED.qualified] = TableRoute(TYPED, "dbzfix.dbzfix.typed", typed_encoder, DebeziumEnvelope(
        typed_encoder, SourceInfo("dbzfix", "pgshovel", SCHEMA, "typed"), "dbzfix.dbzfix.typed"))
    emitter = Emitter("dbzfix", routes, "txns", None, sink)
    marks = SnapshotMarks(lambda item, marker: emitter.snapshot_row(*item, SNAPSHOT_TS_MS, marker, SNAPSHOT_LSN))
    for name, rows in SNAPSHOT_ROWS.items():
        for row in rows:
            marks.add(name, (TABLES[name], row, "p"))
    for rid in (1, 2):
        marks.add("typed", (TYPED, [rid], "p"))
    marks.finish()
    last_lsn = SNAPSHOT_LSN  # the relay's first transaction: where its stream started
    for txn in wal_transactions():
        txid, ts_ms = txn["xid"], txn["ts_us"] // 1000
        emitter.begin(txid, "p", ts_ms, txn["ts_us"], last_lsn)
        for op, table, row, old, lsn in txn["changes"]:
            emitter.change(Change(txid, ts_ms, op, row, TABLES[table].qualified, old, 1, 0, lsn), "p")
        emitter.end(txid, "p", ts_ms)
        last_lsn = txn["end_lsn"]

    def decode(topic: str, data: bytes | None):
        if data is None or not use_avro:
            return data and json.loads(data)
        return fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(
            schemas[topic] if topic in schemas else avro.key_schema("dbzfix", TABLES[topic[-1]])))

    out: dict[str, list] = {t: [] for t in TOPICS.values()}
    for topic, key, value, _ in sink.produced:
        if topic in out:
            key_schema = avro.key_schema("dbzfix", TABLES[topic[-1]])
            key_value = (fastavro.schemaless_reader(io.BytesIO(key[5:]), fastavro.parse_schema(key_schema))
                         if use_avro else json.loads(key))
            out[topic].append({"key": key_value, "value": decode(topic, value)})
    return out, schemas


def debezium() -> dict[str, list]:
    return {t: [{"key": m["key"]["payload"], "value": m["value"] and m["value"]["payload"]}
                for m in FIXTURE["topics"][t]] for t in TOPICS.values()}


def _kind(value) -> str:
    return type(value).__name__


def _payloads(messages: dict[str, list]) -> dict[str, list]:
    return {t: [{"key": m["key"]["payload"], "value": m["value"] and m["value"]["payload"]} for m in ms]
            for t, ms in messages.items()}


@pytest.mark.parametrize("use_avro,connect", [(False, False), (True, False), (False, True)])
def test_same_messages_fields_and_values_as_debezium(use_avro, connect):
    mine, _ = ours(use_avro, connect)
    if connect:
        mine = _payloads(mine)
    theirs = debezium()
    for topic in TOPICS.values():
        assert [(m["key"], m["value"] is None) for m in mine[topic]] == \
               [(m["key"], m["value"] is None) for m in theirs[topic]]  # same keys, tombstones in place
        for ours_msg, their_msg in zip(mine[topic], theirs[topic], strict=True):
            o, t = ours_msg["value"], their_msg["value"]
            if t is None:
                continue
            assert list(o) == list(t)
            assert list(o["source"]) == list(t["source"]) + EXTRA_SOURCE_FIELDS
            assert {k: _kind(v) for k, v in o.items()} == {k: _kind(v) for k, v in t.items()}
            assert (o["before"], o["after"], o["op"], o["transaction"]) == (t["before"], t["after"], t["op"],
                                                                           t["transaction"])
            source, their_source = dict(o["source"]), t["source"]
            assert source.pop("position") == "p"
            assert (source.pop("connector"), their_source["connector"]) == ("pgshovel", "postgresql")
            assert source.pop("version") != their_source["version"]
            if t["op"] == "r":  # the snapshot's own transaction id: Debezium's txid_current(), ours none
                assert (source.pop("txId"), _kind(their_source["txId"])) == (None, "int")
                # the snapshot's time: Debezium's in µs, ours (the relay's clock) in ms
                assert source.pop("ts_us") == their_source["ts_ms"] * 1000
                assert source.pop("ts_ns") == their_source["ts_ms"] * 1_000_000
            elif their_source["sequence"].startswith("[null,"):
                # Debezium's first transaction after its snapshot (no commit processed yet); ours: the
                # LSN the relay's stream started from (here the snapshot's consistent point)
                assert source.pop("sequence") == f'["{SNAPSHOT_LSN}","{their_source["lsn"]}"]'
            theirs_rest = {k: v for k, v in their_source.items() if k in source}
            assert source == theirs_rest


def _without_position(schema: dict) -> dict:
    fields = [{**f, "fields": [s for s in f["fields"] if s["field"] != "position"]} if f["field"] == "source"
              else f for f in schema["fields"]]
    return {**schema, "fields": fields}


def test_connect_schemas_are_debeziums():
    """JSON with Connect schemas: every key and value schema is Debezium's, field for field (the
    value's source struct with pgshovel2's position field last)."""
    mine, _ = ours(False, connect=True)
    for topic in TOPICS.values():
        for ours_msg, their_msg in zip(mine[topic], FIXTURE["topics"][topic], strict=True):
            assert ours_msg["key"]["schema"] == their_msg["key"]["schema"]
            if their_msg["value"] is None:
                assert ours_msg["value"] is None
                continue
            source = next(f for f in ours_msg["value"]["schema"]["fields"] if f["field"] == "source")
            assert source["fields"][-1] == {"type": "string", "optional": False, "field": "position"}
            assert _without_position(ours_msg["value"]["schema"]) == their_msg["value"]["schema"]


def test_snapshot_markers_are_debeziums():
    markers = [m["value"]["source"]["snapshot"] for t in TOPICS.values() for m in ours(False)[0][t]
               if m["value"] and m["value"]["op"] == "r"]
    theirs = [m["value"]["payload"]["source"]["snapshot"] for t in TOPICS.values() for m in FIXTURE["topics"][t]
              if m["value"] and m["value"]["payload"]["op"] == "r"]
    assert markers == theirs == ["first", "true", "last_in_data_collection", "first_in_data_collection",
                                 "last_in_data_collection"]


def _connect_to_avro(schema: dict):
    """What Confluent's AvroConverter (AvroData) makes of a Connect schema, names left out:
    optional -> ["null", T] default null, or [T, "null"] with its default first."""
    if schema["type"] == "struct":
        t: object = {"type": "record", "fields": [
            {"name": f["field"], **_field_type(f)} for f in schema["fields"]]}
    else:
        t = {"int32": "int", "int64": "long", "string": "string"}[schema["type"]]
    return t


def _field_type(schema: dict) -> dict:
    base = _connect_to_avro(schema)
    if not schema.get("optional"):
        return {"type": base}
    if "default" in schema:
        return {"type": [base, "null"], "default": schema["default"]}
    return {"type": ["null", base], "default": None}


def _strip(schema):
    """An Avro schema without names, namespaces and properties, named types inlined."""
    named: dict[str, object] = {}

    def walk(s):
        if isinstance(s, list):
            return [walk(x) for x in s]
        if isinstance(s, str):
            return walk(named[s]) if s in named else s
        if s["type"] == "record":
            named[f"{s.get('namespace', '')}.{s['name']}".lstrip(".")] = s
            return {"type": "record", "fields": [
                {"name": f["name"], "type": walk(f["type"]), **({"default": f["default"]} if "default" in f else {})}
                for f in s["fields"]]}
        return s
    return walk(schema)


def test_avro_schema_is_what_the_avro_converter_makes_of_debeziums():
    _, schemas = ours(True)
    for topic, schema in schemas.items():
        theirs = _connect_to_avro(FIXTURE["topics"][topic][0]["value"]["schema"])
        mine = _strip(schema)
        source = next(f for f in mine["fields"] if f["name"] == "source")["type"]
        assert [f["name"] for f in source["fields"][-len(EXTRA_SOURCE_FIELDS):]] == EXTRA_SOURCE_FIELDS
        source["fields"] = source["fields"][:-len(EXTRA_SOURCE_FIELDS)]
        assert mine == theirs


def test_fixture_is_real_debezium_3_4():
    """Guard against a hand-edited fixture: it holds Debezium's own version and Connect schemas."""
    value = FIXTURE["topics"][TOPICS["a"]][0]["value"]
    assert value["payload"]["source"]["version"] == FIXTURE["debezium"] == "3.4.3.Final"
    assert value["schema"]["name"] == "dbzfix.dbzfix.a.Envelope"
    assert next(f for f in value["schema"]["fields"] if f["field"] == "source")["name"] == \
        "io.debezium.connector.postgresql.Source"
