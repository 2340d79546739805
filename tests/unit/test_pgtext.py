"""Values as PostgreSQL prints them (pgshovel2.consumer.pgtext), from both wire forms.

Every expected string is PostgreSQL 15's own output (psql, TimeZone UTC, DateStyle ISO,
IntervalStyle postgres) for the value in the comment or test name; the integration test
tests/integration/test_tail.py compares with a live server for whole rows.
"""

import base64
import math
import random
import struct
from decimal import Decimal

import pytest

from pgshovel2.codec.temporal import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, interval_to_iso
from pgshovel2.consumer import pgtext
from pgshovel2.consumer.pgtext import (
    array_text,
    avro_bare,
    avro_text,
    bytea_text,
    date_text,
    float4_text,
    float8_text,
    guess_kind,
    interval_text,
    json_text,
    jsonb_text,
    kind_of_type,
    numeric_text,
    time_text,
    timestamp_text,
    timetz_text,
)

# SELECT x::real for: 3.4028235e38, 1e6, 123456, 1234567, 1e-5, 0.0001, '-0', 'NaN', '-Infinity', 1.4e-45,
# 0.1, 16777216, 1/3, -2.5, 1945844.25 (a tie between two 8-digit decimals: the even one)
FLOAT4 = [(3.4028234663852886e+38, "3.4028235e+38"), (1e6, "1e+06"), (123456.0, "123456"),
          (1234567.0, "1.234567e+06"), (1e-5, "1e-05"), (0.0001, "0.0001"), (-0.0, "-0"), (float("nan"), "NaN"),
          (float("-inf"), "-Infinity"), (1.401298464324817e-45, "1e-45"), (0.10000000149011612, "0.1"),
          (16777216.0, "1.6777216e+07"), (0.3333333432674408, "0.33333334"), (-2.5, "-2.5"),
          (1945844.25, "1.9458442e+06"), (1945844.75, "1.9458448e+06")]
# SELECT x::float8 for: 1e15, 1e14, 123456789012345.6, 1e-5, 0.0001, '-0', 1e100, 1/3, 5e-324, 100, 'Infinity'
FLOAT8 = [(1e15, "1e+15"), (1e14, "100000000000000"), (123456789012345.6, "123456789012345.6"), (1e-5, "1e-05"),
          (0.0001, "0.0001"), (-0.0, "-0"), (1e100, "1e+100"), (1 / 3, "0.3333333333333333"), (5e-324, "5e-324"),
          (100.0, "100"), (float("inf"), "Infinity"), (-1.5e300, "-1.5e+300"), (1e16, "1e+16")]


@pytest.mark.parametrize(("value", "text"), FLOAT4)
def test_real_is_the_float32s_shortest_text(value, text):
    assert float4_text(value) == text


@pytest.mark.parametrize(("value", "text"), FLOAT8)
def test_double_precision(value, text):
    assert float8_text(value) == text


def _shortest_f32(x: float) -> str:
    """The reference: the fewest digits reading back as float32 x, then the nearest to x, then (a tie, as
    '1945844.25'::real gives 1.9458442e+06) the even last digit, by brute force."""
    f32 = struct.Struct("<f")
    for p in range(1, 10):
        exact = Decimal(x)
        rounded = f"{x:.{p - 1}e}"  # half-even
        mantissa, exp = rounded.split("e")
        unit = Decimal(1).scaleb(int(exp) - (p - 1))
        candidates = {rounded} | {f"{Decimal(mantissa).scaleb(int(exp)) + d:.{p - 1}e}" for d in (-unit, unit)}
        good = [c for c in candidates if abs(Decimal(c)) < Decimal("3.4028236e38")
                and f32.unpack(f32.pack(float(Decimal(c))))[0] == x]
        if good:
            return min(good, key=lambda c: (abs(Decimal(c) - exact), c != rounded))
    raise AssertionError(x)


def test_real_digits_on_random_and_power_of_two_floats():
    rnd = random.Random(12)
    f32 = struct.Struct("<f")
    values = [f32.unpack(struct.pack("<I", rnd.getrandbits(32)))[0] for _ in range(3000)]
    values += [sign * f32.unpack(struct.pack("<I", e << 23))[0] for e in range(1, 255) for sign in (1, -1)]
    for x in (v for v in values if math.isfinite(v) and v):
        assert Decimal(float4_text(x)) == Decimal(_shortest_f32(x)), x  # the same shortest, nearest digits


def test_numeric_with_its_scale():
    assert numeric_text(12345, 2) == "123.45"
    assert numeric_text(-100, 4) == "-0.0100"
    assert numeric_text(0, 3) == "0.000"
    assert numeric_text(15, 0) == "15"


def test_dates_and_timestamps():
    assert date_text(19000) == "2022-01-08"
    assert date_text(-735160) == "0044-03-15 BC"  # '0044-03-15 BC'::date - '1970-01-01'
    assert date_text(2932897) == "10000-01-01"
    assert (date_text(INT32_MAX), date_text(INT32_MIN)) == ("infinity", "-infinity")
    assert timestamp_text(1_709_210_096_789_000, True) == "2024-02-29 12:34:56.789+00"
    assert timestamp_text(1_709_210_096_000_000, False) == "2024-02-29 12:34:56"
    assert timestamp_text(-63_517_780_799_500_000, False) == "0044-03-15 12:00:00.5 BC"
    assert timestamp_text(-63_517_780_800_000_000, True) == "0044-03-15 12:00:00+00 BC"
    assert timestamp_text(253_402_300_800_000_000, False) == "10000-01-01 00:00:00"
    assert (timestamp_text(INT64_MAX, True), timestamp_text(INT64_MIN, False)) == ("infinity", "-infinity")
    assert time_text(86_400_000_000) == "24:00:00"
    assert time_text(45_296_500_000) == "12:34:56.5"
    assert (timetz_text("12:34:56.5+03:00"), timetz_text("12:34:56-05:30")) == ("12:34:56.5+03", "12:34:56-05:30")


# (months, days, microseconds) -> PostgreSQL's text of that interval
INTERVALS = [((14, 3, 14_706_500_000), "1 year 2 mons 3 days 04:05:06.5"), ((0, 0, 0), "00:00:00"),
             ((0, -1, 7_200_000_000), "-1 days +02:00:00"), ((0, 0, -3_723_250_000), "-01:02:03.25"),
             ((-14, 0, 0), "-1 years -2 mons"), ((10, 0, 0), "10 mons"), ((0, -3, 0), "-3 days"),
             ((0, 1, -1_000_000), "1 day -00:00:01"), ((0, 0, 360_000_000_000), "100:00:00"), ((1, 0, 0), "1 mon"),
             ((-1, 2, -10_800_000_000), "-1 mons +2 days -03:00:00"), ((0, 0, 1), "00:00:00.000001")]


@pytest.mark.parametrize(("parts", "text"), INTERVALS)
def test_interval_from_the_wires_iso_form(parts, text):
    assert interval_text(interval_to_iso(list(parts))) == text


def test_bytea_json_and_arrays():
    assert bytea_text(b"\x00\xff\x00") == "\\x00ff00"
    parsed = {"a": [1, Decimal("1.50"), Decimal("1E+2"), None, "x\ny", "é", True]}
    assert jsonb_text(parsed) == '{"a": [1, 1.50, 100, null, "x\\ny", "é", true]}'
    assert array_text([b"\x00\xff", None], bytea_text) == '{"\\\\x00ff",NULL}'
    assert array_text(["a b", "", "NULL", 'x"y', "back\\slash", "null", "é"], str) == \
        '{"a b","","NULL","x\\"y","back\\\\slash","null",é}'
    assert array_text([[1, 2], [3, None]], str) == "{{1,2},{3,NULL}}"
    assert array_text([], str) == "{}"


def test_json_encoding_values_by_kind():
    assert json_text("bool", False)(True) == "t" and json_text("bool", False)(False) == "f"
    assert json_text("int8", False)(-9_000_000_000) == "-9000000000"
    assert json_text("float4", False)(Decimal("3.4028234663852886e+38")) == "3.4028235e+38"
    assert json_text("float4", False)("NaN") == "NaN"
    assert json_text("float8", False)(Decimal("0.1")) == "0.1"
    assert json_text("float8", False)("-Infinity") == "-Infinity"
    assert json_text("numeric", False)("0.1000000000000000000000000001") == "0.1000000000000000000000000001"
    assert json_text("bytea", False)(base64.b64encode(b"\x00\xff").decode()) == "\\x00ff"
    assert json_text("timestamp", False)("2024-02-29T12:34:56.500000") == "2024-02-29 12:34:56.5"
    assert json_text("timestamptz", False)("2024-02-29T12:34:56.000000Z") == "2024-02-29 12:34:56+00"
    assert json_text("timestamptz", False)("0044-03-15T12:00:00.000000Z BC") == "0044-03-15 12:00:00+00 BC"
    assert json_text("timestamp", False)("infinity") == "infinity"
    assert json_text("date", False)("0044-03-15 BC") == "0044-03-15 BC"
    assert json_text("time", False)("24:00:00.000000") == "24:00:00"
    assert json_text("timetz", False)("01:02:03+03:00") == "01:02:03+03"
    assert json_text("interval", False)("P-1DT2H") == "-1 days +02:00:00"
    assert json_text("jsonb", False)({"k": [Decimal("1.5"), None]}) == '{"k": [1.5, null]}'
    assert json_text("jsonb", False)(True) == "true"
    assert json_text("int4", True)([1, None, 3]) == "{1,NULL,3}"
    assert json_text("text", True)(["a b", None]) == '{"a b",NULL}'
    assert json_text("box", True)("{(1,1),(0,0);(2,2),(1,1)}") == "{(1,1),(0,0);(2,2),(1,1)}"  # box[]: text
    assert json_text("uuid", False)("6ecd8c99-4036-403d-bf84-cf8400f67836") == "6ecd8c99-4036-403d-bf84-cf8400f67836"


def test_avro_datums_by_schema():
    assert avro_text("boolean", "bool")(False) == "f"
    assert avro_text("long", "int8")(7) == "7"
    assert avro_text("float", "float4")(3.4028234663852886e+38) == "3.4028235e+38"
    assert avro_text(["null", "double"], "float8")(1e15) == "1e+15"
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4}
    assert avro_text(decimal, "numeric")((-100).to_bytes(2, "big", signed=True)) == "-0.0100"
    assert avro_text("bytes", "bytea")(b"\x00\xff") == "\\x00ff"
    assert avro_text({"type": "int", "logicalType": "date"}, "date")(INT32_MIN) == "-infinity"
    assert avro_text({"type": "long", "logicalType": "time-micros"}, "time")(1) == "00:00:00.000001"
    assert avro_text({"type": "long", "logicalType": "timestamp-micros"}, "timestamptz")(0) == \
        "1970-01-01 00:00:00+00"
    assert avro_text({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp")(0) == \
        "1970-01-01 00:00:00"
    assert avro_text("string", "interval")("P1Y2M3DT4H5M6.5S") == "1 year 2 mons 3 days 04:05:06.5"
    assert avro_text("string", "timetz")("12:34:56.5+03:00") == "12:34:56.5+03"
    assert avro_text({"type": "string", "logicalType": "uuid"}, "uuid")("x") == "x"
    assert avro_text("string", "jsonb")('{"a": 1}') == '{"a": 1}'
    dates = {"type": "array", "items": ["null", {"type": "int", "logicalType": "date"}]}
    assert avro_text(dates, "date")([0, None, INT32_MAX]) == "{1970-01-01,NULL,infinity}"
    assert avro_text({"type": "array", "items": ["null", "string"]}, "interval")(["P1D"]) == '{"1 day"}'
    assert [avro_bare(s, k) for s, k in [("boolean", "bool"), (["null", "long"], "int8"), (decimal, "numeric"),
                                         ("string", "numeric"), ("string", "money"), ("string", "text"),
                                         ({"type": "int", "logicalType": "date"}, "date"), (dates, "date"),
                                         ("bytes", "bytea")]] == [True, True, True, True, True, False, False,
                                                                 False, False]


def test_kinds_of_columns_the_set_record_does_not_know():
    assert [kind_of_type(t) for t in ("interval day to second", "interval(3)[]", "time with time zone",
                                      "time(3) with time zone", "timestamp with time zone", "jsonb", "json",
                                      "money", "numeric(10,2)", "character varying(5)")] == \
        ["interval", "interval", "timetz", "timetz", "text", "jsonb", "json", "money", "numeric", "text"]
    assert [guess_kind(v) for v in (True, 1, Decimal("1.5"), "x", {"a": 1}, [None, "x"], [[1]])] == \
        [("bool", False), ("int8", False), ("float8", False), ("text", False), ("jsonb", False), ("text", True),
         ("int8", True)]
    assert pgtext.BARE_KINDS >= {"bool", "int4", "float4", "numeric"}
