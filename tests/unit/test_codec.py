"""Type mapping: trigger forms -> Avro/JSON values, and the name rules."""


import pytest

from pgshovel2 import names
from pgshovel2.catalog import Column
from pgshovel2.codec import temporal
from pgshovel2.codec.pgarray import parse_array
from pgshovel2.codec.types import field_type
from pgshovel2.errors import EncodeError


def col(kind, is_array=False, precision=None, scale=None):
    return Column("c", 1, kind, kind, is_array, True, precision, scale)


@pytest.mark.parametrize("days", [-800_000, -1, 0, 59, 10_000, 3_000_000])
def test_civil_days_roundtrip(days):
    assert temporal.days_from_civil(*temporal.civil_from_days(days)) == days


def test_dates():
    assert temporal.date_to_json(0) == "2000-01-01"
    assert temporal.date_to_avro(0) == 10957
    assert temporal.date_to_json(-730119) == "0001-01-01"
    assert temporal.date_to_json(-730120) == "0001-12-31 BC"
    assert temporal.date_to_json(2**31 - 1) == "infinity"
    assert temporal.date_to_avro(-(2**31)) == -(2**31)


def test_timestamps():
    us = 762_514_496_789_012  # 2024-02-29 09:34:56.789012 UTC
    assert temporal.timestamp_to_json(us, True) == "2024-02-29T09:34:56.789012Z"
    assert temporal.timestamp_to_json(us, False) == "2024-02-29T09:34:56.789012"
    assert temporal.timestamp_to_avro(us) == 1_709_199_296_789_012
    assert temporal.timestamp_from_text("2024-02-29 12:34:56.789012+03") == us
    assert temporal.timestamp_to_json(2**63 - 1, True) == "infinity"


@pytest.mark.parametrize("value, iso", [
    ([0, 0, 0], "PT0S"),
    ([14, 3, 14_706_500_000], "P1Y2M3DT4H5M6.5S"),
    ([-14, -3, -14_706_500_000], "P-1Y-2M-3DT-4H-5M-6.5S"),
    ([0, 0, 1], "PT0.000001S"),
])
def test_interval_iso(value, iso):
    assert temporal.interval_to_iso(value) == iso


def test_array_literals():
    assert parse_array('{1,NULL,"a \\"b\\"","NULL"}') == ["1", None, 'a "b"', "NULL"]
    assert parse_array("{{1,2},{3,4}}") == [["1", "2"], ["3", "4"]]
    assert parse_array("[0:1]={x,y}") == ["x", "y"]
    assert parse_array("{}") == []


def test_numeric_decimal_bytes():
    ftype = field_type(col("numeric", precision=10, scale=3))
    assert ftype.avro["logicalType"] == "decimal"
    assert ftype.to_avro("-3.142") == (-3142).to_bytes(2, "big", signed=True)
    with pytest.raises(EncodeError):
        ftype.to_avro("NaN")
    assert field_type(col("numeric")).avro == "string"


def test_floats_keep_special_values():
    ftype = field_type(col("float8"))
    assert ftype.to_json("NaN") == "NaN"
    assert str(ftype.to_avro("-Infinity")) == "-inf"


def test_arrays_map_elementwise():
    ints = field_type(col("int4", is_array=True))
    assert ints.to_avro("{1,NULL,3}") == [1, None, 3]
    ts = field_type(col("timestamptz", is_array=True))
    assert ts.to_json('{"2000-01-01 00:00:00+00"}') == ["2000-01-01T00:00:00.000000Z"]
    assert ts.to_json([0, None]) == ["2000-01-01T00:00:00.000000Z", None]  # trigger's own form
    with pytest.raises(EncodeError):
        ints.to_avro("{{1},{2}}")
    intervals = field_type(col("interval", is_array=True))
    assert intervals.to_json([[14, 3, 0], None]) == ["P1Y2M3D", None]


def test_money_and_bytea():
    assert field_type(col("money")).to_json("-$1,234.56") == "-1234.56"
    assert field_type(col("bytea")).to_json("00ff") == "AP8="


@pytest.mark.parametrize("ident, topic, avro", [
    ("pgbench_accounts", "pgbench_accounts", "pgbench_accounts"),
    ("Sch.ema", "Sch_x2eema", "Sch_x2eema"),
    ("T \"q\"", "T_x20_x22q_x22", "T_x20_x22q_x22"),
    ("ä-1", "_xc3_xa4-1", "_xc3_xa4_x2d1"),
    ("1st", "1st", "_1st"),
])
def test_name_escaping(ident, topic, avro):
    assert names.topic_part(ident) == topic
    assert names.avro_name(ident) == avro
