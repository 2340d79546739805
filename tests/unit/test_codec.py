"""Type mapping: trigger forms -> Avro/JSON values, and the name rules."""

import io
import json
import math
import random
import re

import fastavro
import pytest

from pgshovel2 import names
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, jsonvalue, temporal
from pgshovel2.codec.pgarray import format_array, parse_array
from pgshovel2.codec.rows import RowEncoder, encode_json, encode_record, loads_row, txn_record_avro, txn_record_json
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
    assert parse_array('{1,NULL,"a \\"b\\"","NULL"}') == (None, ["1", None, 'a "b"', "NULL"])
    assert parse_array("{{1,2},{3,4}}") == (None, [["1", "2"], ["3", "4"]])
    assert parse_array("[0:1]={x,y}") == ([0], ["x", "y"])
    assert parse_array("[1:1][-3:-2]={{x,y}}") == ([1, -3], [["x", "y"]])
    assert parse_array("[1:2]={x,y}") == (None, ["x", "y"])  # default bounds are not kept
    assert parse_array("{}") == (None, [])
    assert parse_array("1 2 3") == (None, ["1", "2", "3"])  # int2vector, oidvector
    for bad in ("{1,2", "[0:1]{1}", "{1}x"):
        with pytest.raises(EncodeError):
            parse_array(bad)


def test_array_literals_render_back():
    assert format_array([[1, None], [3, 4]], None, str) == "{{1,NULL},{3,4}}"
    assert format_array(["a b", "", "NULL", 'q"\\'], [0], str) == '[0:3]={"a b","","NULL","q\\"\\\\"}'
    assert format_array([[1, 2]], [-1, 5], str) == "[-1:-1][5:6]={{1,2}}"
    assert format_array([], None, str) == "{}"
    text = '[0:1][1:2]={{"a,b",NULL},{"}",x}}'
    bounds, items = parse_array(text)
    assert format_array(items, bounds, str) == text


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
    assert ints.to_avro("{{1},{2}}") == [[1], [2]]
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


def _sign(x: float) -> float:
    return math.copysign(1.0, x)


def test_multidimensional_and_bounded_arrays():
    ints = field_type(col("int4", is_array=True))
    for convert in (ints.to_avro, ints.to_json):  # text form (element types without own forms)
        assert convert("{{1,2},{3,NULL}}") == [[1, 2], [3, None]]
        assert convert("{{{1}},{{2}}}") == [[[1]], [[2]]]
        assert convert("[0:1]={1,2}") == {"lower_bounds": [0], "elements": [1, 2]}
        assert convert("[-2:-1][3:3]={{1},{2}}") == {"lower_bounds": [-2, 3], "elements": [[1], [2]]}
        assert convert("{}") == []
    f8 = field_type(col("float8", is_array=True))  # the capture's own form: dims, bounds, flat elements
    form = {"dims": [2, 2], "lower_bounds": [1, 1], "elements": [-0.0, "NaN", "Infinity", None]}
    got = f8.to_avro(form)
    assert got[0][1] != got[0][1] and got[1] == [float("inf"), None] and _sign(got[0][0]) == -1
    assert f8.to_json(form) == [[-0.0, "NaN"], ["Infinity", None]]
    assert f8.to_json({"dims": [1], "lower_bounds": [0], "elements": [1.5]}) == \
        {"lower_bounds": [0], "elements": [1.5]}
    iv = field_type(col("interval", is_array=True))  # element forms that are JSON arrays themselves
    assert iv.to_json({"dims": [1, 2], "lower_bounds": [1, 1], "elements": [[0, 1, 0], None]}) == [["P1D", None]]
    dates = field_type(col("date", is_array=True))  # multi-dimensional rows queued by older capture code
    assert dates.to_json("{{2000-01-02,NULL}}") == [["2000-01-02", None]]
    with pytest.raises(EncodeError):
        ints.to_avro({"dims": [3], "lower_bounds": [1], "elements": [1]})
    with pytest.raises(EncodeError):
        ints.to_avro("{{{{{{{1}}}}}}}")  # 7 dimensions


def test_arrays_of_text_types_refuse_non_text_forms():
    texts = field_type(Column("c", 1, "d_date[]", "d_date", True, True))  # array of a domain: text
    assert texts.to_json('{2024-01-01,NULL}') == ["2024-01-01", None]
    with pytest.raises(EncodeError):
        texts.to_json([8766])  # the own form an older capture wrote for arrays of domains over date


def test_negative_zero_keeps_its_sign():
    for kind in ("float4", "float8"):
        ftype = field_type(col(kind))
        assert _sign(ftype.to_avro(-0.0)) == -1
        assert json.dumps(ftype.to_json(-0.0)) == "-0.0"
    assert _sign(field_type(col("float8", is_array=True)).to_avro("{-0,0}")[0]) == -1
    old = loads_row('[1,-0,"2024-01-01",[-0,0],-0.5]')  # rows queued by older capture code
    assert old[0] == 1 and isinstance(old[0], int) and _sign(old[1]) == -1 and _sign(old[3][0]) == -1
    assert _sign(old[3][1]) == 1 and old[2] == "2024-01-01"
    assert loads_row('["-0,",0]') == ["-0,", 0]


def test_json_null_and_escapes():
    jb = field_type(col("jsonb"))
    assert jb.to_avro is None and jb.avro == "string"  # Avro: the JSON text, 'null' is not NULL
    assert jb.to_json('{"a": [1, null]}') == {"a": [1, None]}
    assert jb.to_json("null") == {"pgshovel.json": "null"}
    assert jb.to_json('"null"') == "null"
    assert jb.to_json("[1, 2]") == [1, 2]
    looks_escaped = '{"x": [{"pgshovel.json": 1}]}'
    assert jb.to_json(looks_escaped) == {"pgshovel.json": looks_escaped}
    assert jb.to_json('{"pgshovel\\u002ejson": "x"}') == {"pgshovel.json": '{"pgshovel\\u002ejson": "x"}'}
    # type json keeps what JSON in UTF-8 cannot say: numbers beyond a double, lone surrogates
    for text in ('[1e400]', '{"a": -1E999}', '{"a": "\\ud83d"}', '["x\\udc00"]', '{"\\udfff": 1}'):
        assert jb.to_json(text) == {"pgshovel.json": text}, text
        assert encode_json(jb.to_json(text)) == json.dumps({"pgshovel.json": text}, separators=(",", ":")).encode()
    assert jb.to_json('["\\ud83d\\ude00", 1e308]') == ["\U0001F600", 1e308]  # a pair is one character
    arr = field_type(col("json", is_array=True))
    assert arr.to_json('{NULL,null,"[1,2]","{\\"a\\": 1}"}') == \
        [None, {"pgshovel.json": "null"}, {"pgshovel.json": "[1,2]"}, {"a": 1}]
    assert arr.to_avro('{NULL,null}') == [None, "null"]
    for text in ("null", looks_escaped, "[1]", '{"pgshovel.json": "x"}'):
        assert jsonvalue.unescape([jb.to_json(text)]) in ([jsonvalue.JsonValue(text)], [json.loads(text)])
    assert jsonvalue.unescape({"pgshovel.json": "null"}) == jsonvalue.JsonValue("null")


OLD_INT_ARRAY = {"type": "array", "items": ["null", "int"]}  # what pgshovel2 registered before


@pytest.mark.parametrize("nullable", [True, False])
def test_array_schemas_read_todays_data(nullable):
    """New reader schemas resolve data written with the schemas registered before (BACKWARD),
    and one-dimensional arrays are written with the same bytes as before."""
    column = Column("a", 1, "integer[]", "int4", True, nullable)
    old = {"type": "record", "name": "t", "fields": [
        {"name": "a", "type": ["null", OLD_INT_ARRAY] if nullable else OLD_INT_ARRAY}]}
    new = {"type": "record", "name": "t", "fields": [avro._field(column, field_type(column))]}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), {"a": [1, None, 3]})
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, fastavro.parse_schema(old), fastavro.parse_schema(new))
    assert read == {"a": [1, None, 3]}
    if nullable:
        again = io.BytesIO()
        fastavro.schemaless_writer(again, fastavro.parse_schema(new), {"a": [1, None, 3]})
        assert again.getvalue() == buf.getvalue()
    key_new = {"type": "record", "name": "k", "fields": [avro._field(column, field_type(column), key=True)]}
    assert key_new["fields"][0]["type"] == (["null", field_type(column).key_avro] if nullable
                                            else field_type(column).key_avro)


def test_keys_leave_out_lower_bounds_and_values_share_named_records():
    cols = (Column("id", 1, "integer[]", "int4", True, False), Column("a", 2, "integer[]", "int4", True, True),
            Column("b", 3, "integer[]", "int4", True, True))
    table = Table("s", "t", cols, ("id",), "primary key")
    schema = avro.value_schema("x", table)
    assert schema["fields"][2]["type"][-1] == "pgshovel.BoundedArray_int"  # defined once, then by name
    writers = avro.AvroWriter(avro.key_schema("x", table), 1), avro.AvroWriter(schema, 2)
    enc = RowEncoder(table, True, *writers)
    row = enc.convert(["[0:1]={1,2}", "{{1,2}}", "[3:3]={7}"])
    assert enc.key(row) == writers[0].encode({"id": [1, 2]})
    datum = fastavro.schemaless_reader(io.BytesIO(enc.value(row)[5:]), fastavro.parse_schema(schema))
    assert datum == {"id": {"lower_bounds": [0], "elements": [1, 2]}, "a": [[1, 2]],
                     "b": {"lower_bounds": [3], "elements": [7]}}


def test_encode_errors_name_table_column_and_type():
    table = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key")
    enc = RowEncoder(table, True, None, avro.AvroWriter(avro.value_schema("x", table), 2))
    with pytest.raises(EncodeError, match=re.escape('table "s"."t", column "id" (integer): ')):
        enc.value(enc.convert(["x"]))


def test_txn_records_are_what_encode_record_makes_of_the_datum():
    """The BEGIN/END templates (JSON and Avro) against the datum through json and the Avro writer."""
    rng = random.Random(5)
    writer, parsed = avro.AvroWriter(avro.TRANSACTION_SCHEMA, 77), fastavro.parse_schema(avro.TRANSACTION_SCHEMA)
    for _ in range(300):
        counts = None
        if rng.random() < 0.6:
            topics = {"".join(rng.choice("abcXYZ09._-") for _ in range(rng.randint(1, 20)))
                      for _ in range(rng.randint(0, 4))}
            counts = sorted((t, rng.randint(0, 10**6)) for t in topics)
        kind, txid, ts_ms = rng.choice(["BEGIN", "END"]), rng.randint(0, 2**63 - 1), rng.randint(0, 2**45)
        position = rng.choice([f"{rng.randint(0, 2**64):016X}:{rng.randint(0, 10**9):010d}", 'odd "pos" \\ é'])
        datum = {"type": kind, "txid": txid, "position": position, "ts_ms": ts_ms,
                 "event_count": None if counts is None else sum(n for _, n in counts),
                 "data_collections": None if counts is None else [{"data_collection": t, "event_count": n}
                                                                  for t, n in counts],
                 "table": None}
        assert txn_record_json(kind, txid, position, ts_ms, counts) == encode_record(datum, None)
        assert txn_record_avro(writer.header, kind, txid, position, ts_ms, counts) == encode_record(datum, writer)
        assert fastavro.schemaless_reader(io.BytesIO(encode_record(datum, writer)[5:]), parsed) == datum
