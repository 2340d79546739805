"""The native row codec (pgshovel2_native) against the Python codec: random rows of every
WIRE.md type, in the capture's forms (NULLs, arrays, numerics with scale, timestamps at their
edges, infinities, NaN, unicode, bytea, jsonb, unchanged TOAST values as NULL), encoded by
both must give the same bytes -- Avro (with the registry prefix) and JSON, keys and values,
row envelope and debezium envelope -- from the row as a list and as its JSON text.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, native
from pgshovel2.codec.rows import RowEncoder, loads_row
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, TxnOrder

I32, I64 = 2**31 - 1, 2**63 - 1
UNICODE = "é€😀\u2028\x00\x1f\"\\/\n\t ÿ中"
# (column kind, pg_type, is_array, precision, scale) of every WIRE.md row
TYPES = [
    ("bool", "boolean", False, None, None), ("int2", "smallint", False, None, None),
    ("int4", "integer", False, None, None), ("int8", "bigint", False, None, None),
    ("oid", "oid", False, None, None), ("float4", "real", False, None, None),
    ("float8", "double precision", False, None, None), ("numeric", "numeric(12,2)", False, 12, 2),
    ("numeric", "numeric(38,10)", False, 38, 10), ("numeric", "numeric(5,0)", False, 5, 0),
    ("numeric", "numeric", False, None, None), ("money", "money", False, None, None),
    ("text", "text", False, None, None), ("varchar", "character varying(20)", False, None, None),
    ("bpchar", "character(3)", False, None, None), ("name", "name", False, None, None),
    ("bytea", "bytea", False, None, None), ("uuid", "uuid", False, None, None),
    ("date", "date", False, None, None), ("time", "time without time zone", False, None, None),
    ("timetz", "time with time zone", False, None, None),
    ("timestamp", "timestamp without time zone", False, None, None),
    ("timestamptz", "timestamp with time zone", False, None, None),
    ("interval", "interval", False, None, None), ("json", "json", False, None, None),
    ("jsonb", "jsonb", False, None, None), ("mood", "mood", False, None, None),
    ("inet", "inet", False, None, None),
]
ARRAYS = [("int4", "integer[]", True, None, None), ("text", "text[]", True, None, None),
          ("date", "date[]", True, None, None), ("box", "box[]", True, None, None)]


def _float(rng: random.Random):
    return rng.choice([0.0, -0.0, 1.5, -2.25e-7, 1e16, 1e15, 123456.789, 1e-5, 1e-4, 3.4e38, 1e300,
                       rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randint(-30, 30), 7, -3,
                       "NaN", "Infinity", "-Infinity"])


def _decimal(rng: random.Random, precision: int, scale: int) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, precision)))
    whole, frac = digits[:max(len(digits) - scale, 0)] or "0", digits[max(len(digits) - scale, 0):].rjust(scale, "0")
    return ("-" if rng.random() < 0.4 else "") + str(int(whole)) + (f".{frac}" if scale else "")


# JSON texts whose reading or writing has a rule of its own: escapes (kept, decoded, re-escaped),
# duplicate and escaped keys, surrogates, number forms, nesting at and past the depth limit,
# whitespace, and texts json.loads refuses.
JSON_TEXTS = ['{"a":1,"a":2}', '{"a":1,"\\u0061":2}', '{"k": "x\\u0041\\n\\"\\\\\\/\\u00e9\\t"}',
              '"\\ud83d\\ude00"', '"\\ud83d"', '{"pgshovel\\u002ejson": 1}', '[{"pgshovel.json": 1, "b": 2}]',
              '[1.0, 1e5, -0, -0.0, 1E400, 2.5e-3, 0.1, 123456789012345678901234567890]', '1e309', '-1e309',
              '  {"a" : [ ] , "b" : { } }  ', '{"a":{"a":1}}', 'null', ' null ', '[[[]]]', '"\\u0000\\u001f"',
              '{"\\u00e9": "é\u2028"}', "[" * 201 + "]" * 201, "[" * 200 + "]" * 200,
              "[" * 100 + "]" * 100, "[" * 101 + "]" * 101, '{"a":' * 101 + "1" + "}" * 101,
              '["[[[{{{\\"' + "]" * 100 + '"' + ",[1]" * 99 + "]", "[" * 100_000 + "]" * 100_000,
              '{"a":1}x', '{"a":1,}',
              '[1,]', '{"a" 1}', '"\t"', 'NaN', '[Infinity]', '01', '1.', '.5', '-', 'tru', '"abc', '"\\x"',
              '\ufeff{}', '{"a":[1,{"b":null}],"c":"\\"quoted\\""}', '{"": ""}', '[true,false,null]']


def _random_json(rng: random.Random, depth: int = 0):
    if depth > 3 or rng.random() < 0.4:
        return rng.choice([None, True, 0, -7, 2**70, 1.5, -0.0, 1e-7, "", "x", "q\"uote\\", UNICODE, "\n\x01"])
    if rng.random() < 0.5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "b", "pgshovel.json", UNICODE, "k\"ey"]): _random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def _json_text(rng: random.Random, odd: bool) -> str:
    """A json column's text; odd: also JSON_TEXTS, random nestings and spacing (not odd: the same
    draws as before those were added, so the other tests' random workloads stay as they were)."""
    if odd and rng.random() < 0.1:
        return rng.choice(JSON_TEXTS)
    value = rng.choice([None, 1, -0.5, 1e300, "x", [1, [2]], {"a": [True, None]}, {"pgshovel.json": "t"},
                        {"k": {"pgshovel.json": 1}}, UNICODE, {"n": 12345678901234567890123}, [], {}]
                       + ([_random_json(rng)] if odd else []))
    separators = [(",", ":"), (", ", ": ")] + ([(" , ", " :  ")] if odd else [])
    return json.dumps(value, ensure_ascii=rng.random() < 0.5, separators=rng.choice(separators))


def value(rng: random.Random, kind: str, is_array: bool, precision, scale, null: float = 0.15, odd: bool = True):
    """A random trigger-form value of a column (None with probability null; odd: JSON_TEXTS too)."""
    if rng.random() < null:
        return None
    if is_array:
        return rng.choice([[1, None, 3], "{a,NULL,\"b c\"}", [], {"dims": [2], "lower_bounds": [0],
                                                                  "elements": [1, 2]}])
    gen = {
        "bool": lambda: rng.random() < 0.5,
        "int2": lambda: rng.randint(-32768, 32767), "int4": lambda: rng.choice([-(2**31), I32, rng.randint(-9, 9)]),
        "int8": lambda: rng.choice([-(2**63), I64, rng.randint(-10**12, 10**12)]), "oid": lambda: rng.randint(0, I32),
        "float4": lambda: _float(rng), "float8": lambda: _float(rng),
        "numeric": lambda: (_decimal(rng, precision, scale) if precision else
                            rng.choice(["NaN", "Infinity", "-1.5", "123456789012345678901234567890.123"])),
        "money": lambda: rng.choice(["$1,234.56", "-$0.01", "($5.00)", "€3,00"]),
        "bytea": lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 9))).hex(),
        "date": lambda: rng.choice([-(2**31), I32, -730120, 0, rng.randint(-2_000_000, 2_000_000)]),
        "time": lambda: rng.choice([0, 86_400_000_000, rng.randint(0, 86_399_999_999)]),
        "timetz": lambda: rng.choice(["12:34:56.5+03", "00:00:00-11:30", "23:59:59+00"]),
        "timestamp": lambda: rng.choice([-(2**63), I64, -211813488000000000, rng.randint(-10**17, 10**17)]),
        "interval": lambda: [rng.randint(-30, 30), rng.randint(-40, 40),
                             rng.choice([0, 1, -14_706_500_000, 20_000_000, rng.randint(-10**12, 10**12)])],
        "json": lambda: _json_text(rng, odd),
    }
    gen["timestamptz"], gen["jsonb"] = gen["timestamp"], gen["json"]
    return gen.get(kind, lambda: rng.choice(["plain", UNICODE, "", "a" * 300]))()


def table(nullable: bool, types: list[tuple]) -> Table:
    """A table of an int8 id and a column of each of types; key (id, the int2 column)."""
    cols = [Column("id", 1, "bigint", "int8", False, False)]
    cols += [Column(f"c{i} {t[1]}", i + 2, t[1], t[0], t[2], nullable, t[3], t[4]) for i, t in enumerate(types)]
    return Table("s", "every type", tuple(cols), ("id", "c1 smallint"), "primary key")


def encoders(tbl: Table, use_avro: bool, envelope: str):
    if not use_avro:
        return RowEncoder(tbl, False)
    key_w = avro.AvroWriter(avro.key_schema("set", tbl), 7)
    value_schema = avro.value_schema("set", tbl) if envelope == "row" else avro.debezium_value_schema("set", tbl)
    return RowEncoder(tbl, True, key_w, avro.AvroWriter(value_schema, 8) if envelope == "row" else None)


def rows(seed: int, count: int, nullable: bool, types: list[tuple], odd: bool = False) -> list[list]:
    """count random rows (odd: with JSON_TEXTS now and then, some of which no codec takes: only
    for the tests that hold the native codec's answer, error included, against Python's)."""
    rng = random.Random(seed)
    null = 0.15 if nullable else 0
    return [[n] + [value(rng, t[0], t[2], t[3], t[4], null=null, odd=odd) for t in types] for n in range(count)]


def python_messages(env, op, row, before):
    """The envelope's messages with the native codec off."""
    saved = env.encoder.native, getattr(env, "_native", None), getattr(env, "_events", None)
    env.encoder.native = env._native = env._events = None
    try:
        return env.change(op, row, before, Context(5, "p", 1, order=TxnOrder()))
    except Exception as exc:  # noqa: BLE001 -- the native path must raise the same
        return type(exc).__name__
    finally:
        env.encoder.native, env._native, env._events = saved


def native_messages(env, op, row, before):
    try:
        return env.change(op, row, before, Context(5, "p", 1, order=TxnOrder()))
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
@pytest.mark.parametrize("nullable", [True, False], ids=["nullable", "not-null"])
@pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])
def test_row_envelope_native_equals_python(use_avro, nullable, arrays):
    """Messages of I/U/D changes (U with and without the old row) through the row envelope; with
    arrays most rows are left to Python (the native codec takes only NULL arrays)."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(nullable, types)
    enc = encoders(tbl, use_avro, "row")
    assert enc.native is not None
    env, taken, total = RowEnvelope(enc), 0, 0
    data = rows(18, 600, nullable, types, odd=True)
    for i, row in enumerate(data):
        before = data[i - 1] if i % 3 == 0 else None
        op = "IUD"[i % 3]
        for form in (row, json.dumps(row), json.dumps(row).encode()):
            text_before = before if before is None or isinstance(form, list) else json.dumps(before)
            want = python_messages(env, op, loads_row(form) if not isinstance(form, list) else form, before)
            got = native_messages(env, op, form, text_before)
            assert got == want, (op, row)
            total += 1
            taken += enc.encode_native(form) is not None
    assert arrays or taken > total // 2, f"the native codec took only {taken} of {total} rows"


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_strings_with_a_special_character_at_every_place(use_avro):
    """The parser and the JSON writer pass plain bytes eight at a time: a quote, backslash or
    control character (or a neighbour that is none: DEL, non-ASCII) at each offset of a word."""
    cols = (Column("id", 1, "bigint", "int8", False, False), Column("v", 2, "text", "text", False, True),
            Column("j", 3, "jsonb", "jsonb", False, True))
    enc = encoders(Table("s", "t", cols, ("id",), "primary key"), use_avro, "row")
    n = 0
    for special in ('"', "\\", "\x00", "\x1f", "\n", "\x7f", "é", " ", "\u2028"):
        for before in range(19):
            for after in (0, 1, 7, 8, 9):
                v = "a" * before + special + "b" * after
                n += 1
                row = [n, v, json.dumps({v: v}, ensure_ascii=after == 1)]
                conv = enc.convert(row)
                want = (enc.key(conv), enc.value(conv))
                for ascii_only in (True, False):
                    assert enc.encode_native(json.dumps(row, ensure_ascii=ascii_only)) == want, v


def test_every_plain_type_is_taken_natively():
    """Each scalar type alone: rows without arrays or odd values are encoded natively (no fallback)."""
    for kind, pg_type, is_array, precision, scale in TYPES:
        if is_array or kind in ("numeric",) and precision is None or kind == "money":
            continue
        cols = (Column("id", 1, "bigint", "int8", False, False), Column("v", 2, pg_type, kind, False, True,
                                                                         precision, scale))
        tbl = Table("s", "t", cols, ("id",), "primary key")
        rng = random.Random(kind)
        for use_avro in (True, False):
            enc = encoders(tbl, use_avro, "row")
            for n in range(200):
                v = value(rng, kind, False, precision, scale, odd=False)
                if kind.startswith("float") and isinstance(v, float) and kind == "float4" and abs(v) > 3.4e38:
                    continue
                conv = enc.convert([n, v])
                got = enc.encode_native(json.dumps([n, v]))
                if got is None:  # left to Python by design: numerics beyond 28 significant digits
                    assert kind == "numeric" and len(v.strip("-").replace(".", "").lstrip("0")) > 28, (kind, v)
                    continue
                assert got == (enc.key(conv), enc.value(conv)), (kind, v)


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_debezium_envelope_native_equals_python(use_avro):
    """The debezium envelope: the native codec writes whole events (keys, row bodies, the rest:
    tests/unit/test_debezium_native.py compares every part and path)."""
    tbl = table(True, TYPES)
    enc = encoders(tbl, use_avro, "debezium")
    writer = avro.AvroWriter(avro.debezium_value_schema("set", tbl), 9) if use_avro else None
    env = DebeziumEnvelope(enc, SourceInfo("set", "db", "s", "every type"), "topic", writer, clock=lambda: 10**18)
    taken = 0
    assert env._native is not None
    data = rows(19, 300, True, TYPES, odd=True)
    for i, row in enumerate(data):
        op = "IUD"[i % 3]
        before = data[i - 1] if op != "I" else None
        want = python_messages(env, op, row, before)
        got = native_messages(env, op, json.dumps(row), json.dumps(before) if before else None)
        assert got == want, (op, row)
        taken += env._native.encode(json.dumps(row), True) is not None
    assert taken > len(data) // 2, f"the native codec took only {taken} of {len(data)} rows"


def test_float_text_is_python_repr():
    """JSON floats as Python's repr: random bit patterns, and halfway cases (dyadic values whose
    exact value ends in 5 one digit past the shortest, where Python rounds half to even)."""
    import struct
    cols = (Column("id", 1, "bigint", "int8", False, False), Column("v", 2, "double precision", "float8", False, True))
    enc = encoders(Table("s", "t", cols, ("id",), "primary key"), False, "row")
    rng = random.Random(7)
    values = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20000)]
    values += [rng.randrange(1, 2**53) / 2 ** rng.randrange(0, 30) * 10 ** rng.randrange(-5, 20) for _ in range(20000)]
    values += [891492719324795.25, 2.0**70, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, 1e22, 1e23]
    for v in values:
        got = enc.encode_native([1, v])
        assert got is not None and got[1] == enc.value(enc.convert([1, v])), v


def test_one_dimensional_arrays_are_taken_natively():
    """Arrays in the capture's JSON forms (a list, or dims/lower_bounds 1/elements) of element types
    with a form of their own: native, and equal; key and value, Avro and JSON, NULL elements."""
    rng = random.Random(3)
    for kind, pg_type in [("int4", "integer[]"), ("float8", "double precision[]"), ("bool", "boolean[]"),
                          ("date", "date[]"), ("timestamptz", "timestamptz[]"), ("interval", "interval[]"),
                          ("bytea", "bytea[]"), ("jsonb", "jsonb[]")]:
        cols = (Column("id", 1, "bigint", "int8", False, False), Column("a", 2, pg_type, kind, True, False),
                Column("b", 3, pg_type, kind, True, True))
        tbl = Table("s", "t", cols, ("id", "a"), "primary key")
        for use_avro in (True, False):
            enc = encoders(tbl, use_avro, "row")
            for n in range(100):
                elems = [value(rng, kind, False, None, None, odd=False) for _ in range(rng.randint(0, 4))]
                a = elems if n % 2 else {"dims": [len(elems)], "lower_bounds": [1], "elements": elems}
                row = [n, a, rng.choice([None, elems])]
                conv = enc.convert(row)
                assert enc.encode_native(json.dumps(row)) == (enc.key(conv), enc.value(conv)), (kind, row)


@pytest.mark.parametrize("envelope", ["row", "debezium"])
def test_union_with_the_value_first_native_equals_python(envelope):
    """Nullable columns added with a DEFAULT are ``[T, "null"]`` unions (null is branch 1): the
    native codec writes every row, NULLs included, as the Python codec does, and fastavro reads
    back what was written."""
    import io

    import fastavro

    cols = (Column("id", 1, "bigint", "int8", False, False),
            Column("t", 2, "text", "text", False, True, default="n/a"),
            Column("i", 3, "integer", "int4", False, True, default=7),
            Column("b", 4, "boolean", "bool", False, True, default=False),
            Column("d", 5, "double precision", "float8", False, True, default=2.5))
    tbl = Table("s", "t", cols, ("id",), "primary key")
    enc = encoders(tbl, True, envelope)
    schema = avro.value_schema("set", tbl) if envelope == "row" else avro.debezium_value_schema("set", tbl)
    if envelope == "row":
        env = RowEnvelope(enc)
    else:
        env = DebeziumEnvelope(enc, SourceInfo("set", "db", "s", "t"), "topic", avro.AvroWriter(schema, 9),
                               clock=lambda: 10**18)
    rng, taken = random.Random(5), 0
    for n in range(200):
        row = [n, rng.choice([None, "x", UNICODE]), rng.choice([None, -3, I32]), rng.choice([None, True]),
               rng.choice([None, 1.5, "NaN"])]
        want = python_messages(env, "I", row, None)
        assert native_messages(env, "I", json.dumps(row), None) == want, row
        native_path = enc.encode_native if envelope == "row" else lambda r: env._native.encode(r, True)
        taken += native_path(json.dumps(row)) is not None
        if envelope == "row":
            got = fastavro.schemaless_reader(io.BytesIO(want[0].value[5:]), fastavro.parse_schema(schema))
            assert [got[k] for k in ("t", "i", "b")] == row[1:4], row
    assert taken == 200  # none left to Python
