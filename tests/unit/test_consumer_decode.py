"""Decoding: Avro written by the relay's own codec, and JSON. The registry is
replaced by a dict of schemas: the decoder only asks it for a schema by id."""

import datetime as dt
import json
import uuid
from decimal import Decimal

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.avro import AvroWriter, value_schema
from pgshovel2.consumer import ConsumerError, Decoder, JsonValue

INT32_MAX, INT64_MIN = 2**31 - 1, -(2**63)
COLUMNS = (Column("id", 1, "integer", "int4", False, False),
           Column("d", 2, "date", "date", False, True),
           Column("ts", 3, "timestamp with time zone", "timestamptz", False, True),
           Column("lts", 4, "timestamp without time zone", "timestamp", False, True),
           Column("n", 5, "numeric(10,2)", "numeric", False, True, 10, 2),
           Column("u", 6, "uuid", "uuid", False, True),
           Column("b", 7, "bytea", "bytea", False, True),
           Column("ds", 8, "date[]", "date", True, True))
TABLE = Table("public", "t", COLUMNS, ("id",), "primary key")


class Schemas:
    """A schema registry's answer to get_schema(id), from a dict."""

    def __init__(self, schemas: dict[int, dict]):
        self.schemas = schemas

    def get_schema(self, schema_id: int):
        return type("Schema", (), {"schema_str": json.dumps(self.schemas[schema_id])})()


def avro(datum: dict) -> bytes:
    return AvroWriter(value_schema("s", TABLE), 7).encode(datum)


def decoder() -> Decoder:
    return Decoder(registry=Schemas({7: value_schema("s", TABLE)}))


RAW = {"id": 1, "d": 19000, "ts": 1_700_000_000_123_456, "lts": 0, "n": (12345).to_bytes(2, "big", signed=True),
       "u": "0b7e8c36-4c36-4a1f-9f5a-2b0f4a6a3c11", "b": b"\x00\xff", "ds": [0, None, INT32_MAX]}


def test_avro_logical_types_become_python_values():
    got = decoder().decode(avro(RAW), "v")
    assert got == {"id": 1, "d": dt.date(2022, 1, 8),
                   "ts": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC),
                   "lts": dt.datetime(1970, 1, 1), "n": Decimal("123.45"),
                   "u": uuid.UUID("0b7e8c36-4c36-4a1f-9f5a-2b0f4a6a3c11"), "b": b"\x00\xff",
                   "ds": [dt.date(1970, 1, 1), None, "infinity"]}


def test_avro_infinities_and_nulls():
    datum = {**{k: None for k in RAW}, "id": 2, "d": INT32_MAX, "ts": INT64_MIN, "lts": 2**63 - 1}
    got = decoder().decode(avro(datum), "v")
    assert (got["d"], got["ts"], got["lts"], got["n"], got["ds"]) == ("infinity", "-infinity", "infinity",
                                                                      None, None)


def test_avro_schema_fetched_once_per_id():
    calls = []
    registry = Schemas({7: value_schema("s", TABLE)})
    fetch = registry.get_schema
    registry.get_schema = lambda i: calls.append(i) or fetch(i)
    dec = Decoder(registry=registry)
    for _ in range(3):
        dec.decode(avro(RAW), "v")
    assert calls == [7]


def test_json_and_null():
    dec = Decoder()
    assert dec.decode(b'{"id": 1, "b": "AP8="}', "v") == {"id": 1, "b": "AP8="}
    assert dec.decode(None, "v") is None


def test_avro_without_registry_and_garbage_name_the_message():
    with pytest.raises(ConsumerError, match="'t' \\[0\\] offset 5 is Avro .*--schema-registry"):
        Decoder().decode(avro(RAW), "'t' [0] offset 5")
    with pytest.raises(ConsumerError, match="cannot decode the value of x"):
        Decoder().decode(b"not json", "the value of x")
    with pytest.raises(ConsumerError, match="cannot decode"):
        decoder().decode(avro(RAW)[:9], "v")  # truncated body


def test_avro_nested_and_bounded_arrays_get_logical_types():
    cols = (Column("id", 1, "integer", "int4", False, False), Column("ds", 2, "date[]", "date", True, True),
            Column("ds2", 3, "date[]", "date", True, False), Column("f", 4, "real[]", "float4", True, True))
    table = Table("public", "a", cols, ("id",), "primary key")
    schema = value_schema("s", table)
    data = AvroWriter(schema, 8).encode({"id": 1, "ds": [[0, None], [1, INT32_MAX]],
                                          "ds2": {"lower_bounds": [0], "elements": [0]}, "f": [-0.0]})
    got = Decoder(registry=Schemas({8: schema})).decode(data, "v")
    assert got["ds"] == [[dt.date(1970, 1, 1), None], [dt.date(1970, 1, 2), "infinity"]]
    assert got["ds2"] == {"lower_bounds": [0], "elements": [dt.date(1970, 1, 1)]}  # by-name record
    assert str(got["f"][0]) == "-0.0"


def test_json_escapes_become_json_values():
    dec = Decoder()
    got = dec.decode(b'{"id":1,"j":{"pgshovel.json":"null"},"n":null,"e":{"a":1},'
                     b'"ja":[{"pgshovel.json":"[1,2]"},null,{"pgshovel.json":"null"}],'
                     b'"b":{"lower_bounds":[0],"elements":[[{"pgshovel.json":"null"}]]}}', "v")
    assert got == {"id": 1, "j": JsonValue("null"), "n": None, "e": {"a": 1},
                   "ja": [JsonValue("[1,2]"), None, JsonValue("null")],
                   "b": {"lower_bounds": [0], "elements": [[JsonValue("null")]]}}
    assert got["j"].value is None and got["ja"][0].value == [1, 2]
    # a column named like the escape key is not an escape: only column values are looked at
    assert dec.decode(b'{"pgshovel.json":"null"}', "v") == {"pgshovel.json": "null"}
    event = dec.decode(b'{"before":null,"after":{"pgshovel.json":"x","j":{"pgshovel.json":"null"}},'
                       b'"op":"c","source":{}}', "v")
    assert event["after"] == {"pgshovel.json": "x", "j": JsonValue("null")}
