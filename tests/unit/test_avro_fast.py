"""The compiled flat-record encoder writes exactly the bytes fastavro writes."""

import io
import math
import random

import fastavro

from pgshovel2.codec.avro_fast import compile_record

SCHEMA = {"type": "record", "name": "r", "fields": [
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "ni", "type": ["null", "int"], "default": None},
    {"name": "s", "type": ["null", "string"], "default": None},
    {"name": "sn", "type": ["string", "null"]},
    {"name": "b", "type": ["null", "bytes"], "default": None},
    {"name": "t", "type": "boolean"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": ["null", "double"], "default": None},
    {"name": "date", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
]}


def reference(datum: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), datum)
    return buf.getvalue()


def random_datum(rnd: random.Random) -> dict:
    def maybe(v):
        return None if rnd.random() < 0.3 else v
    return {
        "i": rnd.choice([0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31), rnd.randint(-(2**31), 2**31 - 1)]),
        "l": rnd.choice([0, -1, 2**63 - 1, -(2**63), rnd.randint(-(2**63), 2**63 - 1)]),
        "ni": maybe(rnd.randint(-1000, 1000)),
        "s": maybe(rnd.choice(["", "ascii", "nön-ascii ✓ 🐘", "x" * 300])),
        "sn": maybe("snap"),
        "b": maybe(bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 200)))),
        "t": rnd.random() < 0.5,
        "f": rnd.choice([0.0, -1.5, 3.25, math.inf, -math.inf]),
        "d": maybe(rnd.choice([math.pi, -0.0, 1e308, math.inf])),
        "date": rnd.randint(-(2**31), 2**31 - 1),
        "ts": maybe(rnd.choice([2**63 - 1, -(2**63), 1_700_000_000_000_000])),
        "dec": (rnd.randint(-(10**9), 10**9)).to_bytes(8, "big", signed=True),
    }


def test_same_bytes_as_fastavro():
    encode = compile_record(SCHEMA)
    assert encode is not None
    rnd = random.Random(7)
    for _ in range(3000):
        datum = random_datum(rnd)
        assert encode(datum) == reference(datum), datum


def test_nan_floats_encode_like_fastavro():
    encode = compile_record(SCHEMA)
    datum = {**random_datum(random.Random(1)), "f": math.nan, "d": math.nan}
    assert encode(datum) == reference(datum)


def test_records_with_arrays_named_references_or_wider_unions_are_left_to_fastavro():
    array = {"type": "record", "name": "a", "fields": [{"name": "x", "type": {"type": "array", "items": "int"}}]}
    named = {"type": "record", "name": "n", "fields": [{"name": "x", "type": ["null", "some.Record"]}]}
    triple = {"type": "record", "name": "u", "fields": [{"name": "x", "type": ["null", "int", "string"]}]}
    assert compile_record(array) is None and compile_record(named) is None and compile_record(triple) is None


def test_records_defined_in_place_encode_like_fastavro():
    """A record field and a ["null", record] field (the debezium envelope's source and transaction)."""
    inner = {**SCHEMA, "name": "inner"}
    outer = {"type": "record", "name": "o", "fields": [
        {"name": "a", "type": SCHEMA}, {"name": "b", "type": ["null", inner]}, {"name": "c", "type": "string"}]}
    encode = compile_record(outer)
    assert encode is not None
    parsed = fastavro.parse_schema(outer)
    rnd = random.Random(9)
    for _ in range(1000):
        datum = {"a": random_datum(rnd), "b": None if rnd.random() < 0.3 else random_datum(rnd), "c": "op"}
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, datum)
        assert encode(datum) == buf.getvalue(), datum
