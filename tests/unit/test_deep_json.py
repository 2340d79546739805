"""json/jsonb values nested far deeper than any recursive reader goes (PostgreSQL accepts tens of
thousands of levels): the Python and the native codec encode them without recursing -- Avro as
the text, JSON as the escape object past MAX_EMBED_DEPTH levels -- both envelopes, keys too,
the same bytes, and the consumer library decodes every message back to the exact text.

Fails (does not skip) when the native extension is not installed: scripts/install.sh builds it.
"""

import json

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, jsonvalue, native
from pgshovel2.consumer import Decoder, JsonValue
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, TxnOrder
from tests.unit.test_consumer_decode import Schemas
from tests.unit.test_native_codec import encoders

DEEP = 100_000
TEXTS = {
    "arrays": "[" * DEEP + "]" * DEEP,
    "objects": '{"a":' * DEEP + '"x"' + "}" * DEEP,
    "mixed": '[{"k":' * (DEEP // 2) + "1" + "}]" * (DEEP // 2),
    "limit": "[" * jsonvalue.MAX_EMBED_DEPTH + "1" + "]" * jsonvalue.MAX_EMBED_DEPTH,
    "over": "[" * (jsonvalue.MAX_EMBED_DEPTH + 1) + "]" * (jsonvalue.MAX_EMBED_DEPTH + 1),
    "brackets in strings": json.dumps(["[" * DEEP, "{" * DEEP, '\\"[[' * 50]),
}
COLS = (Column("id", 1, "integer", "int4", False, False), Column("j", 2, "jsonb", "jsonb", False, True),
        Column("js", 3, "json", "json", False, True), Column("ja", 4, "jsonb[]", "jsonb", True, True))
TABLE = Table("public", "deep", COLS, ("id",), "primary key")
KEYED = Table("public", "deepkey", COLS[1:2] + COLS[:1], ("j",), "primary key")


def _depth(text: str) -> int:
    """Nesting depth by an independent count (brackets outside strings)."""
    depth = top = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            escaped, in_string = (False, in_string) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth -= 1
    return top


@pytest.mark.parametrize("name", list(TEXTS))
def test_too_deep_counts_without_recursion(name):
    text = TEXTS[name]
    assert jsonvalue.too_deep(text) == (_depth(text) > jsonvalue.MAX_EMBED_DEPTH)


def _envelope(kind: str, table: Table, use_avro: bool):
    enc = encoders(table, use_avro, kind)
    if kind == "row":
        return RowEnvelope(enc), avro.value_schema("set", table)
    schema = avro.debezium_value_schema("set", table)
    writer = avro.AvroWriter(schema, 9) if use_avro else None
    return DebeziumEnvelope(enc, SourceInfo("set", "db", table.schema, table.name), "topic", writer,
                            clock=lambda: 10**18), schema


def _messages(env, row, python: bool):
    saved = env.encoder.native, getattr(env, "_native", None), getattr(env, "_events", None)
    if python:
        env.encoder.native = env._native = env._events = None
    try:
        return env.change("I", row, None, Context(5, "p", 1, order=TxnOrder()))
    finally:
        env.encoder.native, env._native, env._events = saved


def _text_of(value) -> str:
    """The JSON text a decoded json value stands for (compact, as jsonvalue.embed wrote it)."""
    if isinstance(value, JsonValue):
        return value.text
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"))


@pytest.mark.parametrize("envelope", ["row", "debezium"])
@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_deep_values_encode_and_decode_back(use_avro, envelope):
    """Every text, as json, jsonb and a jsonb[] element: Python and native give the same bytes, and
    the consumer's decoder gives the text back (Avro: the string; JSON: the embedded value, or
    JsonValue(text) for one nested deeper than MAX_EMBED_DEPTH)."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    env, schema = _envelope(envelope, TABLE, use_avro)
    decoder = Decoder(registry=Schemas({8: avro.value_schema("set", TABLE), 9: schema}))
    for name, text in TEXTS.items():
        row = [1, text, text, [text, None]]
        py = _messages(env, row, python=True)
        assert _messages(env, json.dumps(row), python=False) == py, name
        decoded = decoder.decode(py[-1].value, "v")
        after = decoded["after"] if envelope == "debezium" else decoded
        deep = jsonvalue.too_deep(text)
        for column in ("j", "js"):
            got = after[column]
            if use_avro:
                assert got == text, name
            else:
                assert isinstance(got, JsonValue) == deep, name
                assert _text_of(got) == (text if deep else _canonical(text)), name
        element = after["ja"][0]
        if not use_avro:  # an element that is a JSON array travels escaped at any depth
            assert isinstance(element, JsonValue) == (deep or text.startswith("[")), name
        assert _text_of(element) == (text if use_avro or deep or text.startswith("[") else _canonical(text))


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_deep_jsonb_key(use_avro):
    """jsonb can be a primary key: a deep one is a key like any other, the same from both codecs."""
    env, _ = _envelope("row", KEYED, use_avro)
    for text in (TEXTS["arrays"], TEXTS["objects"]):
        row = [text, 1]
        py = _messages(env, row, python=True)
        assert _messages(env, json.dumps(row), python=False) == py
        if not use_avro:
            assert json.loads(py[0].key) == {"j": {jsonvalue.ESCAPE_KEY: text}}
