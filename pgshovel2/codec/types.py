"""PostgreSQL type -> Avro / JSON mapping: the one place for type conversion.

Input values are the capture trigger's forms (see sql/capture/README.rst):
JSON numbers for integers, floats, dates and times, ``[months, days, us]``
for intervals, hex text for bytea, output-function text for everything else.
:func:`field_type` turns a catalog Column into a :class:`FieldType` with its
Avro schema and two converters; None (SQL NULL) never reaches a converter.
"""

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pgshovel2.catalog import Column
from pgshovel2.codec import temporal
from pgshovel2.codec.pgarray import parse_array
from pgshovel2.errors import EncodeError

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class FieldType:
    """How one column is encoded.

    avro: Avro schema of a non-null value; to_avro / to_json: trigger form ->
    datum for fastavro / natural JSON value; None means identity.
    from_text: array-element text -> trigger form.
    """

    avro: Any
    to_avro: Convert | None
    to_json: Convert | None
    from_text: Convert


def _float_in(v: Any) -> float:
    return float(v) if isinstance(v, str) else v


def _float_json(v: Any) -> Any:
    return v


def _float_text(text: str) -> Any:
    f = float(text)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def _decimal_to_avro(scale: int) -> Convert:
    def convert(v: str) -> bytes:
        try:
            d = Decimal(v)
        except InvalidOperation as exc:
            raise EncodeError(f"cannot parse numeric {v!r}") from exc
        if not d.is_finite():
            raise EncodeError(f"numeric value {v} has no Avro decimal form; "
                              "use an unconstrained numeric column")
        unscaled = int(d.scaleb(scale))
        return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    return convert


def _money(v: str) -> str:
    negative = v.startswith("-") or v.startswith("(")
    digits = "".join(ch for ch in v if ch.isdigit() or ch == ".")
    return f"-{digits}" if negative else digits


def _bytea_text(text: str) -> str:
    return text[2:] if text.startswith("\\x") else text.encode("latin-1").hex()


def _string(avro: Any = "string") -> FieldType:
    return FieldType(avro, None, None, str)


def _scalar(col: Column) -> FieldType:
    kind = col.kind
    if kind == "bool":
        return FieldType("boolean", None, None, lambda t: t == "t")
    if kind in ("int2", "int4"):
        return FieldType("int", None, None, int)
    if kind in ("int8", "oid"):
        return FieldType("long", None, None, int)
    if kind in ("float4", "float8"):
        return FieldType("float" if kind == "float4" else "double", _float_in, _float_json, _float_text)
    if kind == "numeric":
        if col.precision is not None and 0 <= col.scale <= col.precision:
            avro = {"type": "bytes", "logicalType": "decimal",
                    "precision": col.precision, "scale": col.scale}
            return FieldType(avro, _decimal_to_avro(col.scale), None, str)
        return _string()
    if kind == "money":
        return FieldType("string", _money, _money, str)
    if kind == "bytea":
        return FieldType("bytes", bytes.fromhex,
                         lambda v: base64.b64encode(bytes.fromhex(v)).decode("ascii"), _bytea_text)
    if kind == "uuid":
        return _string({"type": "string", "logicalType": "uuid"})
    if kind == "date":
        return FieldType({"type": "int", "logicalType": "date"}, temporal.date_to_avro,
                         temporal.date_to_json, temporal.date_from_text)
    if kind == "time":
        return FieldType({"type": "long", "logicalType": "time-micros"}, None,
                         temporal.time_to_json, temporal.time_from_text)
    if kind in ("timestamp", "timestamptz"):
        utc = kind == "timestamptz"
        logical = "timestamp-micros" if utc else "local-timestamp-micros"
        return FieldType({"type": "long", "logicalType": logical}, temporal.timestamp_to_avro,
                         lambda v: temporal.timestamp_to_json(v, utc), temporal.timestamp_from_text)
    if kind == "timetz":
        return FieldType("string", temporal.timetz_to_iso, temporal.timetz_to_iso, str)
    if kind == "interval":
        return FieldType("string", temporal.interval_to_iso, temporal.interval_to_iso, str)
    if kind in ("json", "jsonb"):
        return FieldType("string", None, json.loads, str)
    return _string()


# Element kinds whose array text cannot be mapped element-wise keep the whole
# array as its text (box[] uses ';' as its delimiter).
_ARRAY_AS_TEXT = {"box"}


def _array(col: Column) -> FieldType:
    if col.kind in _ARRAY_AS_TEXT:
        return _string()
    elem = _scalar(col)
    to_avro = _elements(elem, elem.to_avro)
    to_json = _elements(elem, elem.to_json)
    return FieldType({"type": "array", "items": ["null", elem.avro]}, to_avro, to_json, str)


def _elements(elem: FieldType, convert: Convert | None) -> Convert:
    """Element-wise converter. The trigger writes one-dimensional arrays of types
    with their own forms (dates, times, intervals, floats, bytea, bool) as JSON
    arrays of those forms, and every other array as its text literal."""
    def convert_array(value: str | list) -> list:
        if isinstance(value, list):  # element forms, from the trigger
            forms = value
        else:
            items = parse_array(value)
            if any(isinstance(item, list) for item in items):
                raise EncodeError("multi-dimensional arrays are not supported")
            forms = [None if item is None else elem.from_text(item) for item in items]
        if convert is None:
            return forms
        return [None if form is None else convert(form) for form in forms]

    return convert_array


def field_type(col: Column) -> FieldType:
    """The FieldType of a catalog column (arrays map element-wise)."""
    return _array(col) if col.is_array else _scalar(col)
