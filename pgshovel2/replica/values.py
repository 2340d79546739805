"""Decoded column values (pgshovel2.consumer) -> what replica apply sends for ``%s::<type>``.

Scalars go to psycopg2 as Python values, except where the decoded value is
not what the column's input takes: json/jsonb (their JSON text), bytea in the
JSON encoding (base64 there), dates and timestamps outside Python's range
(the raw Avro number). Arrays are sent as one array literal (array_in text)
built here, so that every dimension, the lower bounds
(``{"lower_bounds", "elements"}``), NULL elements and each element's exact
value (a float's -0, NaN, ±Infinity) arrive as they left the source.
"""

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from typing import Any

from pgshovel2.catalog import Column
from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.codec.pgarray import format_array

Adapt = Callable[[Any], Any]
_UNIX_EPOCH_JULIAN_DAY = 2440588
_DAY_US = 86_400_000_000
_JSON_KINDS = ("json", "jsonb")
_TIMESTAMP_KINDS = ("timestamp", "timestamptz")


def _json_text(json_encoding: bool) -> Adapt:
    def text(value: Any) -> str:
        if isinstance(value, JsonValue):  # escaped in the JSON encoding, e.g. the literal null
            return value.text
        if isinstance(value, str) and not json_encoding:  # Avro carries the JSON text
            return value
        return json.dumps(value, ensure_ascii=False)
    return text


def _bytea(value: Any) -> bytes:
    return base64.b64decode(value) if isinstance(value, str) else value


def _julian(kind: str, value: int) -> str:
    """A raw Avro date (days) or timestamp (µs) since 1970 as PostgreSQL input (Julian day form)."""
    if kind == "date":
        return f"J{value + _UNIX_EPOCH_JULIAN_DAY}"
    days, us = divmod(value, _DAY_US)
    seconds, micro = divmod(us, 1_000_000)
    clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"
    return f"J{days + _UNIX_EPOCH_JULIAN_DAY} {clock}" + ("+00" if kind == "timestamptz" else "")


def _scalar(kind: str, json_encoding: bool) -> Adapt | None:
    """psycopg2 value of a non-NULL decoded scalar; None: the value as it is."""
    if kind in _JSON_KINDS:
        return _json_text(json_encoding)
    if kind == "bytea":
        return _bytea
    if kind == "date" or kind in _TIMESTAMP_KINDS:
        return lambda v: _julian(kind, v) if isinstance(v, int) and not isinstance(v, bool) else v
    return None


def _float_text(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)  # keeps -0.0
    return str(value)


def _element_text(kind: str, json_encoding: bool) -> Callable[[Any], str]:
    """Input text of one non-NULL array element."""
    if kind in _JSON_KINDS:
        return _json_text(json_encoding)
    if kind == "bytea":
        return lambda v: "\\x" + _bytea(v).hex()
    if kind in ("float4", "float8"):
        return _float_text
    if kind == "bool":
        return lambda v: ("t" if v else "f") if isinstance(v, bool) else str(v)
    if kind == "date" or kind in _TIMESTAMP_KINDS:
        def temporal(v: Any) -> str:
            if isinstance(v, int):
                return _julian(kind, v)
            return v.isoformat() if isinstance(v, dt.date) else str(v)
        return temporal
    return lambda v: v.isoformat() if isinstance(v, dt.time) else str(v)


def adapter(col: Column, json_encoding: bool) -> Adapt:
    """The function taking a decoded value of col (None for SQL NULL) to what psycopg2 sends.

    json_encoding: the set's encoding is ``json`` (json values embedded), else Avro.
    """
    if col.pg_type in ("int2vector", "oidvector"):  # arrays whose input is "1 2 3"
        return lambda v: None if v is None else " ".join(str(x) for x in v)
    if col.is_array and col.kind != "box":  # box[] travels as its text (pgshovel2.codec.types)
        element = _element_text(col.kind, json_encoding)

        def array(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, dict):
                return format_array(value["elements"], value["lower_bounds"], element)
            return format_array(value, None, element)
        return array
    scalar = _scalar(col.kind, json_encoding)
    if scalar is None:
        return lambda v: v
    return lambda v: None if v is None else scalar(v)
