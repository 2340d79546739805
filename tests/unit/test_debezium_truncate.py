"""TRUNCATE in the debezium envelope: Debezium's ``op: t`` event (key null, before/after null, source
and transaction) next to the transactions topic's TRUNCATE record when the set's
``debezium.skipped_operations`` lacks ``t``; none by default (Debezium's skipped.operations=t)."""

import json

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.connect import ConnectRowEncoder, table_schemas
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.consumer.decode import Decoder
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.source import Change

TABLE = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key")
TOPIC = "p.s.t"


class RecordingSink:
    def __init__(self):
        self.produced: list[tuple] = []

    def produce(self, topic, key, value, headers):
        self.produced.append((topic, key, value, dict(headers)))


def _run(form: str, truncate_events: bool) -> list[tuple]:
    """The messages of one transaction (insert, TRUNCATE, insert) in form: connect (JSON with
    Connect schemas) or json (schemaless); op t events are JSON only (config.py)."""
    encoder = ConnectRowEncoder(TABLE, table_schemas(TOPIC, TABLE)) if form == "connect" else RowEncoder(TABLE, False)
    envelope = DebeziumEnvelope(encoder, SourceInfo("p", "db", "s", "t"), TOPIC, truncate_events=truncate_events)
    sink = RecordingSink()
    emitter = Emitter("p", {TABLE.qualified: TableRoute(TABLE, TOPIC, encoder, envelope)}, "p.transactions",
                      None, sink)
    emitter.begin(9, "pos", 1000)
    emitter.change(Change(9, 1000, "I", [1], TABLE.qualified, None, 1, 0), "pos")
    emitter.change(Change(9, 1000, "T", None, TABLE.qualified, None, 1, 1), "pos")
    emitter.change(Change(9, 1000, "I", [2], TABLE.qualified, None, 1, 2), "pos")
    emitter.end(9, "pos", 1000)
    return sink.produced


def _event(value: bytes) -> dict:
    return Decoder().decode(value, "v")


@pytest.mark.parametrize("form", ["connect", "json"])
def test_truncate_event_alongside_the_record(form):
    produced = _run(form, truncate_events=True)
    data = [(k, v, h) for t, k, v, h in produced if t == TOPIC]
    assert [h["pgshovel.op"] for _, _, h in data] == ["c", "t", "c"]
    key, value, _ = data[1]
    assert key == {"connect": b'{"schema":null,"payload":null}', "json": b"null"}[form]
    assert Decoder().decode(key, "k") is None  # Connect's null key, as JsonConverter reads it
    event = _event(value)
    assert (event["op"], event["before"], event["after"]) == ("t", None, None)
    assert (event["source"]["schema"], event["source"]["table"], event["source"]["txId"]) == ("s", "t", 9)
    assert event["transaction"] == {"id": "9", "total_order": 2, "data_collection_order": 2}
    records = [json.loads(v) for t, _, v, _ in produced if t == "p.transactions"]
    assert [r["type"] for r in records] == ["BEGIN", "TRUNCATE", "END"]
    assert records[-1]["event_count"] == 3  # the t event is a data message of the transaction
    if form == "connect":
        assert json.loads(value)["schema"]["name"] == f"{TOPIC}.Envelope"


def test_no_truncate_event_by_default():
    produced = _run("connect", truncate_events=False)
    assert [h["pgshovel.op"] for t, _, _, h in produced if t == TOPIC] == ["c", "c"]
    assert [json.loads(v)["type"] for t, _, v, _ in produced if t == "p.transactions"] == ["BEGIN", "TRUNCATE", "END"]
