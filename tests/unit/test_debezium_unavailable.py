"""Debezium's unavailable.value.placeholder for unchanged TOASTed values (pgshovel2.relay.emit.unavailable):
which columns take it in each form, and the values an UPDATE's event carries in Connect JSON,
schemaless JSON and Avro (the same capture-form values through every codec path)."""

import base64
import io
import json

import fastavro

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.connect import ConnectRowEncoder, table_schemas, unwrap
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.emit import unavailable
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, TxnOrder
from pgshovel2.wire import raw_schema

P = "__debezium_unavailable_value"
TABLE = Table("public", "t", (
    Column("id", 1, "text", "text", False, False),
    Column("s", 2, "text", "text", False, True),
    Column("b", 3, "bytea", "bytea", False, True),
    Column("a", 4, "text[]", "text", True, True),
    Column("i", 5, "integer[]", "int4", True, True),
    Column("j", 6, "jsonb", "jsonb", False, True),
    Column("n", 7, "numeric", "numeric", False, True),
    Column("d", 8, "date[]", "date", True, True),
    Column("u", 9, "uuid[]", "uuid", True, True),
), ("id",), "primary key")
ROW = ["k", None, None, None, None, None, None, None, None]  # an UPDATE leaving every other column unchanged
UNCHANGED = (1, 2, 3, 4, 5, 6, 7, 8)
UUID = "b68a35a7-17ad-35b3-af2a-ae46edb4545a"  # Debezium's for the default placeholder (DBZ-6720)


def test_which_columns_take_the_placeholder():
    """Strings, bytes, text and integer arrays everywhere; json where it is a string (Connect, Avro),
    an unconstrained numeric where it is one (Avro, schemaless JSON; Connect: a struct); never the
    key or an array of dates; a uuid array: Debezium's name UUID of it; nothing with unchanged_toast:
    header. (Indexes: s 1 ... n 6, d 7, u 8.)"""
    hexed, ints = P.encode().hex(), list(P.encode())
    common = {1: P, 2: hexed, 3: [P], 4: ints, 8: [UUID]}
    assert unavailable.placeholders(TABLE, P, unavailable.CONNECT) == {**common, 5: P}
    assert unavailable.placeholders(TABLE, P, unavailable.AVRO) == {**common, 5: P, 6: P}
    assert unavailable.placeholders(TABLE, P, unavailable.JSON) == {**common, 6: P}
    assert unavailable.placeholders(TABLE, None, unavailable.CONNECT) == {}


def _update(enc, form: str, writer=None) -> dict:
    env = DebeziumEnvelope(enc, SourceInfo("s", "db", "public", "t"), "topic", writer,
                           placeholders=unavailable.placeholders(TABLE, P, form))
    row = env.fill_unchanged(json.dumps(ROW).encode(), UNCHANGED)
    (msg,) = env.change("U", row, None, Context(7, "p", 1, "false", TxnOrder()))
    if writer is None:
        return unwrap(json.loads(msg.value))
    return fastavro.schemaless_reader(io.BytesIO(msg.value[5:]), fastavro.parse_schema(raw_schema(writer.schema)))


def test_update_event_values_in_every_form():
    """The u event's after (before null: no old row) holds the placeholder in each column's form."""
    b64 = base64.b64encode(P.encode()).decode()
    ints = list(P.encode())
    got = _update(ConnectRowEncoder(TABLE, table_schemas("topic", TABLE)), unavailable.CONNECT)
    assert got["before"] is None
    assert got["after"] == {"id": "k", "s": P, "b": b64, "a": [P], "i": ints, "j": P, "n": None, "d": None,
                            "u": [UUID]}
    got = _update(RowEncoder(TABLE, False, None, None), unavailable.JSON)
    assert got["after"] == {"id": "k", "s": P, "b": b64, "a": [P], "i": ints, "j": None, "n": P, "d": None,
                            "u": [UUID]}
    writer = AvroWriter(avro.debezium_value_schema("s", TABLE), 9)
    key_w = AvroWriter(avro.key_schema("s", TABLE), 10)
    got = _update(RowEncoder(TABLE, True, key_w, None), unavailable.AVRO, writer)["after"]
    assert (got["s"], got["b"], got["j"], got["n"], got["d"]) == (P, P.encode(), P, P, None)
    assert json.dumps(got["a"]).count(P) == 1 and json.dumps(got["i"]).count("95") >= 2


def test_fill_leaves_rows_without_placeholders_alone():
    raw = b'["k",null]'
    assert unavailable.fill(raw, (1,), {}) is raw
    assert unavailable.fill(raw, (1,), {1: "x"}) == ["k", "x"]
