"""PostgreSQL type -> Avro / JSON mapping: the one place for type conversion.

Input values are the capture trigger's forms (see sql/capture/README.rst):
JSON numbers for integers, floats, dates and times, ``[months, days, us]``
for intervals, hex text for bytea, output-function text for everything else;
arrays as in :func:`pgshovel2.codec.pgarray.from_capture`.
:func:`field_type` turns a catalog Column into a :class:`FieldType` with its
Avro schema and two converters; None (SQL NULL) never reaches a converter.
A type without a mapping of its own travels as its output-function text.
"""

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, InvalidOperation
from typing import Any

from pgshovel2.catalog import Column
from pgshovel2.codec import jsonvalue, temporal
from pgshovel2.codec.pgarray import MAX_DIMS, from_capture, map_leaves
from pgshovel2.errors import EncodeError

Convert = Callable[[Any], Any]
JSON_KINDS = ("json", "jsonb")


@dataclass(frozen=True)
class FieldType:
    """How one column is encoded.

    avro: Avro schema of a non-null value (a union, i.e. a list, for arrays);
    to_avro / to_json: trigger form -> datum for fastavro / natural JSON
    value; None means identity. from_text: array-element text -> trigger form.
    key_avro: the Avro schema in a key record when it differs from avro
    (arrays: without the bounded-array branch); see :meth:`key`.
    native: the plan of the native codec (pgshovel2_native, native/src/kinds.rs) for this
    type: (name, decimal scale); ``array:<name>`` an array of that element (one dimension,
    lower bound 1, in the capture's JSON forms: others stay Python); ``("other", 0)`` takes
    only NULL natively.
    """

    avro: Any
    to_avro: Convert | None
    to_json: Convert | None
    from_text: Convert
    key_avro: Any = None
    native: tuple[str, int] = ("other", 0)

    @property
    def key_schema(self) -> Any:
        """The Avro schema of a non-null value in a key record."""
        return self.avro if self.key_avro is None else self.key_avro

    def key(self, converted: Any) -> Any:
        """A converted value as a key field: an array's lower bounds are not part of keys
        (docs/wire.rst), so a bounded array ``{lower_bounds, elements}`` gives its elements."""
        if self.key_avro is not None and isinstance(converted, dict):
            return converted["elements"]
        return converted


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


# numeric has at most 131072 digits before and 16383 after the point: scaleb must not round
# (the default context keeps 28 digits, which lost the rest of a numeric(38,10) value).
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _decimal_to_avro(scale: int) -> Convert:
    def convert(v: str) -> bytes:
        try:
            d = Decimal(v)
        except InvalidOperation as exc:
            raise EncodeError(f"cannot parse numeric {v!r}") from exc
        if not d.is_finite():
            raise EncodeError(f"numeric value {v} has no Avro decimal form; "
                              "use an unconstrained numeric column")
        unscaled = int(d.scaleb(scale, _EXACT))
        return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    return convert


def _money(v: str) -> str:
    negative = v.startswith("-") or v.startswith("(")
    digits = "".join(ch for ch in v if ch.isdigit() or ch == ".")
    return f"-{digits}" if negative else digits


def _bytea_text(text: str) -> str:
    return text[2:] if text.startswith("\\x") else text.encode("latin-1").hex()


def _string(avro: Any = "string") -> FieldType:
    return FieldType(avro, None, None, str, native=("string", 0))


def _scalar(col: Column) -> FieldType:
    kind = col.kind
    if kind == "bool":
        return FieldType("boolean", None, None, lambda t: t == "t", native=("bool", 0))
    if kind in ("int2", "int4"):
        return FieldType("int", None, None, int, native=("int", 0))
    if kind in ("int8", "oid"):
        return FieldType("long", None, None, int, native=("int", 0))
    if kind in ("float4", "float8"):
        return FieldType("float" if kind == "float4" else "double", _float_in, _float_json, _float_text,
                         native=(kind, 0))
    if kind == "numeric":
        if col.precision is not None and 0 <= col.scale <= col.precision:
            avro = {"type": "bytes", "logicalType": "decimal",
                    "precision": col.precision, "scale": col.scale}
            return FieldType(avro, _decimal_to_avro(col.scale), None, str, native=("decimal", col.scale))
        return _string()
    if kind == "money":
        return FieldType("string", _money, _money, str, native=("money", 0))
    if kind == "bytea":
        return FieldType("bytes", bytes.fromhex,
                         lambda v: base64.b64encode(bytes.fromhex(v)).decode("ascii"), _bytea_text,
                         native=("bytea", 0))
    if kind == "uuid":
        return _string({"type": "string", "logicalType": "uuid"})
    if kind == "date":
        return FieldType({"type": "int", "logicalType": "date"}, temporal.date_to_avro,
                         temporal.date_to_json, temporal.date_from_text, native=("date", 0))
    if kind == "time":
        return FieldType({"type": "long", "logicalType": "time-micros"}, None,
                         temporal.time_to_json, temporal.time_from_text, native=("time", 0))
    if kind in ("timestamp", "timestamptz"):
        utc = kind == "timestamptz"
        logical = "timestamp-micros" if utc else "local-timestamp-micros"
        return FieldType({"type": "long", "logicalType": logical}, temporal.timestamp_to_avro,
                         lambda v: temporal.timestamp_to_json(v, utc), temporal.timestamp_from_text,
                         native=(kind, 0))
    if kind == "timetz":
        return FieldType("string", temporal.timetz_to_iso, temporal.timetz_to_iso, str, native=("timetz", 0))
    if kind == "interval":
        return FieldType("string", temporal.interval_to_iso, temporal.interval_to_iso, str,
                         native=("interval", 0))
    if kind in JSON_KINDS:
        return FieldType("string", None, jsonvalue.embed, str, native=("json", 0))
    return _string()


# Element kinds whose array text cannot be mapped element-wise keep the whole
# array as its text (box[] uses ';' as its delimiter).
_ARRAY_AS_TEXT = {"box"}


def _slug(avro: Any) -> str:
    """A name part for an element schema: ``int``, ``date``, ``decimal_12_4``."""
    if isinstance(avro, str):
        return avro
    parts = [avro.get("logicalType") or avro["type"]]
    parts += [str(avro[k]) for k in ("precision", "scale") if k in avro]
    return "_".join(parts).replace("-", "_")


def _nested_items(elem: Any, level: int = 1) -> list:
    """Items of a dimension: NULL, an element, or (up to MAX_DIMS) a sub-array."""
    if level == MAX_DIMS:
        return ["null", elem]
    return ["null", elem, {"type": "array", "items": _nested_items(elem, level + 1)}]


def array_schemas(elem: Any) -> tuple[list, dict]:
    """(value schema, key schema) of an array column whose elements map to Avro schema elem.

    Value: a union of the (nested) array and the record
    ``pgshovel.BoundedArray_<element>`` ``{lower_bounds: array<int>, elements:
    <the nested array>}`` for values whose lower bounds are not all 1. Key: the
    nested array alone. Both read today's one-dimensional ``array<["null", T]>``.
    """
    nested = {"type": "array", "items": _nested_items(elem)}
    bounded = {"type": "record", "name": f"BoundedArray_{_slug(elem)}", "namespace": "pgshovel",
               "fields": [{"name": "lower_bounds", "type": {"type": "array", "items": "int"}},
                          {"name": "elements", "type": nested}]}
    return [nested, bounded], nested


def _array(col: Column) -> FieldType:
    if col.kind in _ARRAY_AS_TEXT:
        return _string()
    elem = _scalar(col)
    elem_json = (lambda text: jsonvalue.embed(text, element=True)) if col.kind in JSON_KINDS else elem.to_json
    value_schema, key_schema = array_schemas(elem.avro)
    return FieldType(value_schema, _elements(elem, elem.to_avro), _elements(elem, elem_json), str,
                     key_avro=key_schema, native=(f"array:{elem.native[0]}", elem.native[1]))


def _elements(elem: FieldType, convert: Convert | None) -> Convert:
    """Element-wise converter of an array's capture form (pgarray.from_capture) to
    nested lists of element values, or ``{"lower_bounds", "elements"}`` when a
    lower bound is not 1."""
    def to_values(text: str) -> Any:
        return convert(elem.from_text(text))

    def require_text(form: Any) -> Any:
        if not isinstance(form, str):  # e.g. an array of a domain over date queued by an older version
            raise EncodeError(f"array element {form!r} is not text, and this element type travels as text")
        return form

    plain_text = convert is None and elem.from_text is str

    def convert_array(value: Any) -> Any:
        bounds, items, dims, text = from_capture(value)
        if dims > MAX_DIMS:
            raise EncodeError(f"array of {dims} dimensions (PostgreSQL allows {MAX_DIMS})")
        if text:
            leaf = elem.from_text if convert is None else to_values
        else:
            leaf = require_text if plain_text else convert
        out = items if leaf is None else map_leaves(items, dims, leaf)
        return out if bounds is None else {"lower_bounds": bounds, "elements": out}

    return convert_array


def field_type(col: Column) -> FieldType:
    """The FieldType of a catalog column (arrays map element-wise)."""
    return _array(col) if col.is_array else _scalar(col)
