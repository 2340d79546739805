"""pgoutput changes decoded by the native decoder (native/src/pgoutput.rs: rows as capture JSON
text) against the Python converters (pgshovel2.codec.textforms): random rows of every WIRE.md
type as PostgreSQL's output functions print them (NULLs, unchanged TOAST 'u' columns with and
without an old row, arrays, NaN/Infinity floats and numerics, infinity and BC dates and
timestamps, large numerics, jsonb with unicode, texts outside the pinned forms) give the same
items -- the same values, of the same Python types -- and the same key and value bytes in both
envelopes, Avro and JSON. Rows without an odd text or a multi-dimensional array (or one with
bounds) must be taken natively.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import math
import random
import struct

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, native, textforms
from pgshovel2.codec.rows import as_values
from pgshovel2.consumer.pgtext import date_text, float4_text, float8_text, timestamp_text
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import RowEnvelope
from pgshovel2.relay.logical.pgoutput import relations as pgoutput_relations
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder, SetTable
from pgshovel2.relay.logical.relation_layout import RelationLayout
from pgshovel2.relay.source import Change
from tests.unit.pgoutput_bytes import tuple_data
from tests.unit.test_native_codec import ARRAYS, TYPES, UNICODE, _json_text, encoders, native_messages, python_messages

OID = 4242
# type OID (as pg_attribute has it), base type OID, element OID of every kind the tests use
OIDS = {"bool": (16, 16, 0), "int2": (21, 21, 0), "int4": (23, 23, 0), "int8": (20, 20, 0), "oid": (26, 26, 0),
        "float4": (700, 700, 0), "float8": (701, 701, 0), "numeric": (1700, 1700, 0), "money": (790, 790, 0),
        "text": (25, 25, 0), "varchar": (1043, 1043, 0), "bpchar": (1042, 1042, 0), "name": (19, 19, 0),
        "bytea": (17, 17, 0), "uuid": (2950, 2950, 0), "date": (1082, 1082, 0), "time": (1083, 1083, 0),
        "timetz": (1266, 1266, 0), "timestamp": (1114, 1114, 0), "timestamptz": (1184, 1184, 0),
        "interval": (1186, 1186, 0), "json": (114, 114, 0), "jsonb": (3802, 3802, 0), "mood": (90001, 90001, 0),
        "inet": (869, 869, 0)}
ARRAY_OIDS = {"int4": (1007, 23), "text": (1009, 25), "date": (1182, 1082), "box": (1020, 603),
              "float8": (1022, 701), "timestamptz": (1185, 1184), "interval": (1187, 1186), "bool": (1000, 16)}
MORE_ARRAYS = [("float8", "double precision[]", True, None, None), ("timestamptz", "timestamptz[]", True, None, None),
               ("interval", "interval[]", True, None, None), ("bool", "boolean[]", True, None, None)]
I64 = 2**63 - 1


def _interval(rng: random.Random) -> str:
    parts = []
    for unit in ("year", "mon", "day"):
        n = rng.choice([0, 0, 1, -1, rng.randint(-400, 400)])
        if n:
            parts.append(f"{n:+d}" if unit == "day" and parts and rng.random() < 0.5 else str(n))
            parts.append(unit + ("" if abs(n) == 1 else "s"))
    if rng.random() < 0.6 or not parts:
        us = rng.choice([0, 1, 500_000, 14_706_500_000, rng.randint(0, 10**12), I64])
        s, frac = divmod(us, 1_000_000)
        clock = f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{frac:06d}".rstrip("0") if frac else "")
        sign = rng.choice(["", "-", "+"]) if parts else rng.choice(["", "-"])
        parts.append(sign + clock)
    return rng.choice([" ".join(parts), " ".join(parts), "-178000000 years", "-2562047788:00:54.775808"])


def _float_text(rng: random.Random, kind: str) -> str:
    special = rng.choice(["NaN", "Infinity", "-Infinity", "-0", "0", "1e+100", "5e-324", "1e-45", "100"])
    if rng.random() < 0.3:
        return special
    v = rng.choice([rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randint(-30, 30), float(rng.randint(-99, 99))])
    if kind == "float4":
        return float4_text(struct.unpack("<f", struct.pack("<f", v))[0])
    return float8_text(v)


def _timestamp(rng: random.Random, tz: bool) -> str:
    us = rng.choice([-(2**63), I64, -211813488000000000 - 946684800000000, rng.randint(-10**17, 10**17),
                     rng.randint(-62135596800000000 - 10**15, -62135596800000000), 9214646400000000000 - 1])
    text = timestamp_text(us, tz)
    if tz and rng.random() < 0.2 and "infinity" not in text:  # offsets a pinned session never prints
        text = text.replace("+00", rng.choice(["+05:30", "-03:00:15", "-11"]))
    return text


def text_of(rng: random.Random, kind: str, is_array: bool) -> str:
    """A random output-function text of a column of kind (PostgreSQL's, pinned settings)."""
    if is_array:
        return rng.choice({"date": ["{2020-01-01,NULL,\"0044-03-15 BC\"}", "{infinity}",
                                    "[0:1]={2020-01-01,2020-01-02}"],
                           "float8": ["{1.5,NaN,-0,NULL}", "{{1,2},{3,4}}", "{}"],
                           "timestamptz": ["{\"2020-01-01 00:00:00+00\",NULL}", "{-infinity}"],
                           "interval": ["{\"1 year 2 mons\",\"-00:00:01\"}"], "bool": ["{t,f,NULL}", "{}"]}
                          .get(kind, ["{1,2,NULL}", "{\"a b\",NULL,\"é\\\"\"}", "{}", "[0:1]={1,2}"]))
    gen = {
        "bool": lambda: rng.choice("tf"), "int2": lambda: str(rng.randint(-32768, 32767)),
        "int4": lambda: str(rng.choice([-(2**31), 2**31 - 1, rng.randint(-9, 9)])),
        "int8": lambda: str(rng.choice([-(2**63), I64, rng.randint(-10**12, 10**12)])),
        "oid": lambda: str(rng.choice([0, 4294967295, rng.randint(0, 10**6)])),
        "float4": lambda: _float_text(rng, "float4"), "float8": lambda: _float_text(rng, "float8"),
        "numeric": lambda: rng.choice(["NaN", "Infinity", "-Infinity", "-1.50", "0", "12.34",
                                       "123456789012345678901234567890.123456789", str(rng.randint(-10**9, 10**9))]),
        "money": lambda: rng.choice(["$1,234.56", "-$0.01", "$0.00"]),
        "bytea": lambda: "\\x" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 9))).hex(),
        "date": lambda: date_text(rng.choice([2**31 - 1, -(2**31), -730120, 0, 2932896, -2451545 - 1000,
                                              rng.randint(-2_000_000, 2_000_000)])),
        "time": lambda: rng.choice(["00:00:00", "24:00:00", "12:34:56.5", "23:59:59.999999", "01:02:03.000001"]),
        "timetz": lambda: rng.choice(["12:34:56.5+03", "00:00:00-11:30", "23:59:59+00"]),
        "timestamp": lambda: _timestamp(rng, False), "timestamptz": lambda: _timestamp(rng, True),
        "interval": lambda: _interval(rng), "json": lambda: _json_text(rng, True),
    }
    gen["jsonb"] = gen["json"]
    return gen.get(kind, lambda: rng.choice(["plain", UNICODE, "", "a" * 300, "\\x41"]))()


ODD = {"bool": ["true", "1"], "int4": ["+5", "007", "-0", " 5"], "float8": ["1.", ".5", "1e5x", "inf"],
       "date": ["2020-1-02", "20-01-02", "2020-01-02 AD", "2020-01-02 BC"],
       "time": ["1:02:03", "01:02:03.", "01:02:03.1234567", "01:02"],
       "timestamp": ["2020-01-02T03:04:05", "2020-01-02 03:04:05.1234567", "2020-01-02 03:04:05+1",
                     "2020-01-02 3:04:05"],
       "interval": ["1 day  02:00:00", "1 week", "@ 1 day", "", "1 days 02:00", "P1D"], "bytea": ["41", "\\x4"]}


def table(types: list[tuple]) -> Table:
    cols = [Column("id", 1, "bigint", "int8", False, False)]
    cols += [Column(f"c{i} {t[1]}", i + 2, t[1], t[0], t[2], True, t[3], t[4]) for i, t in enumerate(types)]
    return Table("s", "every type", tuple(cols), ("id", "c1 smallint"), "primary key")


def _oids(col: Column) -> tuple[int, int, int]:
    if col.is_array:
        oid, elem = ARRAY_OIDS[col.kind]
        return oid, oid, elem
    return OIDS[col.kind]


def decoder(tbl: Table, python: bool, monkeypatch) -> PgoutputDecoder:
    """A decoder of tbl's relation with its layout settled (the Python converters only when python)."""
    oids = [_oids(c) for c in tbl.columns]
    convs = [textforms.converter(base, elem) for _, base, elem in oids]
    type_oids = {c.attnum: o[0] for c, o in zip(tbl.columns, oids, strict=True)}
    dec = PgoutputDecoder({tbl.qualified: SetTable(tbl, type_oids, convs)})
    cols = b"".join(b"\x00" + c.name.encode() + b"\x00" + struct.pack(">Ii", o[0], -1)
                    for c, o in zip(tbl.columns, oids, strict=True))
    dec.feed(b"R" + struct.pack(">I", OID) + tbl.schema.encode() + b"\x00" + tbl.name.encode() + b"\x00d"
             + struct.pack(">H", len(oids)) + cols, 0)
    dec.feed(b"B" + struct.pack(">QqI", 0x90, 0, 5), 0)
    with monkeypatch.context() as m:
        if python:
            m.setattr(pgoutput_relations, "native_rows", lambda *_: None)
        first = dec.feed(b"D" + struct.pack(">I", OID) + b"K" + tuple_data([b"0"] + [None] * (len(oids) - 1)), 1)
        dec.settle(next(i for i in first if isinstance(i, RelationLayout)))
    assert (dec._relations[OID].native is None) == python
    return dec


def message(rng: random.Random, tbl: Table, n: int, odd: float) -> tuple[bytes, bool]:
    """A random I/U/D message of tbl; True when an odd text or an array value the native decoder
    leaves to Python (several dimensions, bounds) is in it."""
    special = []

    def row(toast: bool) -> list:
        out = [str(n).encode()]
        for c in tbl.columns[1:]:
            r = rng.random()
            if toast and r < 0.1 and c.name != "c1 smallint":
                out.append(...)
            elif r < 0.25:
                out.append(None)
            elif c.kind in ODD and not c.is_array and r > 1 - odd:
                out.append(rng.choice(ODD[c.kind]).encode())
                special.append(c.name)
            else:
                out.append(text_of(rng, c.kind, c.is_array).encode())
        return out
    kind = rng.choice("IUUD")
    new = row(kind == "U") if kind != "D" else None
    old_kind = rng.choice(["", "K", "O"]) if kind == "U" else rng.choice(["K", "O"]) if kind == "D" else ""
    old = row(False) if old_kind else None
    if old_kind == "K":
        old = [v if c.name in tbl.key else None for v, c in zip(old, tbl.columns, strict=True)]
    data = kind.encode() + struct.pack(">I", OID) + (old_kind.encode() + tuple_data(old) if old_kind else b"")
    data += b"N" + tuple_data(new) if new is not None else b""
    arrays = any(v not in (None, ...) and c.is_array and not (v.startswith(b"{") and b"{" not in v[1:])
                 for r in (new, old) if r for v, c in zip(r, tbl.columns, strict=True))
    return data, arrays or bool(special)


def typed(v):
    """A value with its Python type spelled out (1 != 1.0, -0.0 != 0.0, NaN == NaN)."""
    if isinstance(v, list):
        return ["list", *map(typed, v)]
    if isinstance(v, dict):
        return ["dict", *((k, typed(x)) for k, x in v.items())]
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v.hex())
    return (type(v).__name__, v)


def outcome(dec: PgoutputDecoder, data: bytes):
    try:
        return dec.feed(data, 0x100)
    except Exception as exc:  # noqa: BLE001 -- both paths must fail alike
        return type(exc).__name__


def same_change(got: Change, want: Change) -> None:
    assert (got.op, got.table, got.ordinal, got.lsn, got.unchanged) == \
           (want.op, want.table, want.ordinal, want.lsn, want.unchanged)
    assert typed(as_values(got.row)) == typed(want.row)
    assert typed(as_values(got.before)) == typed(want.before)


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
@pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])
def test_native_changes_equal_python(use_avro, arrays, monkeypatch):
    """Items and both envelopes' messages of random changes; odd texts fail alike in both paths."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    tbl = table(TYPES + ARRAYS + MORE_ARRAYS if arrays else TYPES)
    nat, py = decoder(tbl, False, monkeypatch), decoder(tbl, True, monkeypatch)
    row_env = RowEnvelope(encoders(tbl, use_avro, "row"))
    deb_enc = encoders(tbl, use_avro, "debezium")
    deb_env = DebeziumEnvelope(deb_enc, SourceInfo("set", "db", "s", "every type"), "topic",
                               avro.AvroWriter(avro.debezium_value_schema("set", tbl), 9) if use_avro else None,
                               clock=lambda: 10**18)
    rng, taken, plain, errors = random.Random(18 + arrays), 0, 0, 0
    for n in range(800):
        data, special = message(rng, tbl, n, odd=0.02)
        got, want = outcome(nat, data), outcome(py, data)
        if isinstance(want, str):
            assert got == want, data
            errors += 1
            continue
        assert len(got) == len(want) == 1, data
        same_change(got[0], want[0])
        change = got[0]
        if not special:
            plain += 1
            assert isinstance(change.row or b"", bytes), f"left to Python: {data!r}"
        taken += isinstance(change.row, bytes)
        op, py_change = change.op, want[0]
        for env in (row_env, deb_env):
            assert native_messages(env, op, change.row, change.before) == \
                   python_messages(env, op, py_change.row, py_change.before), data
    assert errors > 0, "no odd text raised: the test does not try them"
    assert taken >= plain > 100, (taken, plain)


def test_odd_texts_are_left_to_python_and_equal(monkeypatch):
    """Each odd text alone (a single column): the native decoder leaves it to Python when Python
    reads it differently or refuses it, and takes it only when it gives the same value."""
    for kind, texts in ODD.items():
        pg_type = next(t[1] for t in TYPES if t[0] == kind)
        cols = (Column("id", 1, "bigint", "int8", False, False), Column("v", 2, pg_type, kind, False, True))
        tbl = Table("s", "t", cols, ("id",), "primary key")
        nat, py = decoder(tbl, False, monkeypatch), decoder(tbl, True, monkeypatch)
        for text in texts:
            data = b"I" + struct.pack(">I", OID) + b"N" + tuple_data([b"1", text.encode()])
            got, want = outcome(nat, data), outcome(py, data)
            if isinstance(want, str):
                assert got == want, (kind, text)
            else:
                same_change(got[0], want[0])


def test_python_path_when_native_is_off(monkeypatch):
    """PGSHOVEL2_NATIVE=0 (module() None): relations get no native decoder and rows are lists."""
    monkeypatch.setattr(native, "module", lambda: None)
    tbl = table(TYPES)
    dec = PgoutputDecoder({tbl.qualified: SetTable(tbl, {}, [])})
    assert pgoutput_relations.native_rows([0], [int]) is None and dec.tables


def test_one_dimensional_arrays_are_taken_natively(monkeypatch):
    """Arrays of element types with a form of their own, one dimension, lower bound 1: native
    (rows as JSON text) and equal; several dimensions or bounds: left to Python, equal."""
    for kind, pg_type, *_ in [*MORE_ARRAYS, ARRAYS[2]]:
        cols = (Column("id", 1, "bigint", "int8", False, False), Column("a", 2, pg_type, kind, True, True))
        tbl = Table("s", "t", cols, ("id",), "primary key")
        nat, py = decoder(tbl, False, monkeypatch), decoder(tbl, True, monkeypatch)
        rng = random.Random(kind)
        for _ in range(60):
            text = text_of(rng, kind, True).encode()
            got, want = outcome(nat, b"I" + struct.pack(">I", OID) + b"N" + tuple_data([b"1", text])), \
                outcome(py, b"I" + struct.pack(">I", OID) + b"N" + tuple_data([b"1", text]))
            same_change(got[0], want[0])
            assert isinstance(got[0].row, bytes) == (text.startswith(b"{") and b"{" not in text[1:]), text
