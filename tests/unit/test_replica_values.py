"""Replica apply's value adaptation: decoded values -> what is sent for ``%s::<type>``."""

import datetime as dt
from decimal import Decimal

from pgshovel2.catalog import Column
from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.replica.values import adapter


def adapt(pg_type: str, kind: str, value, is_array: bool = False, json_encoding: bool = False):
    return adapter(Column("c", 1, pg_type, kind, is_array, True), json_encoding)(value)


def test_arrays_become_literals_with_dimensions_and_bounds():
    assert adapt("integer[]", "int4", [[1, None], [3, 4]], True) == "{{1,NULL},{3,4}}"
    assert adapt("integer[]", "int4", {"lower_bounds": [0, 2], "elements": [[1, 2]]}, True) == "[0:0][2:3]={{1,2}}"
    assert adapt("integer[]", "int4", [], True) == "{}"
    assert adapt("integer[]", "int4", None, True) is None
    assert adapt("text[]", "text", ["a,b", None, "NULL", ""], True) == '{"a,b",NULL,"NULL",""}'
    assert adapt("int2vector", "int2", [1, 2], True) == "1 2"


def test_float_elements_keep_sign_and_specials():
    values = [-0.0, float("nan"), float("inf"), float("-inf"), 0.1, "NaN", 1]
    assert adapt("double precision[]", "float8", values, True) == "{-0.0,NaN,Infinity,-Infinity,0.1,NaN,1}"
    assert str(adapt("real", "float4", -0.0)) == "-0.0"  # scalars: psycopg2 renders -0.0 itself


def test_typed_elements():
    assert adapt("bytea[]", "bytea", [b"\x00\xff", "AP8="], True) == '{"\\\\x00ff","\\\\x00ff"}'
    assert adapt("date[]", "date", [dt.date(2024, 2, 29), "infinity", 0], True) == "{2024-02-29,infinity,J2440588}"
    tz = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert adapt("timestamptz[]", "timestamptz", [tz], True) == "{2024-01-01T00:00:00+00:00}"
    assert adapt("numeric[]", "numeric", [Decimal("1.50")], True) == "{1.50}"
    assert adapt("boolean[]", "bool", [True, False], True) == "{t,f}"
    assert adapt("timestamp", "timestamp", -1) == "J2440587 23:59:59.999999"


def test_json_null_and_sql_null():
    assert adapt("jsonb", "jsonb", None) is None
    assert adapt("jsonb", "jsonb", JsonValue("null"), json_encoding=True) == "null"
    assert adapt("jsonb", "jsonb", "null") == "null"  # Avro: the JSON text
    assert adapt("jsonb", "jsonb", "s", json_encoding=True) == '"s"'  # JSON: an embedded string
    assert adapt("jsonb", "jsonb", {"a": [1]}, json_encoding=True) == '{"a": [1]}'
    got = adapt("jsonb[]", "jsonb", [None, JsonValue("null"), JsonValue("[1]"), {"a": 1}], True, True)
    assert got == '{NULL,"null",[1],"{\\"a\\": 1}"}'  # an unquoted null would be NULL
