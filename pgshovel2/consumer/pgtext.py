"""Column values as PostgreSQL prints them (its output functions, DateStyle ISO,
IntervalStyle postgres, TimeZone UTC), computed from what a set's messages carry.

Two sources, one result: Avro datums read *without* logical types (the
physical values: days, microseconds, unscaled decimal bytes; see
:func:`avro_text`), and values of the JSON encoding (:func:`json_text`).
Each builder returns a :data:`Text`: a non-null value -> PostgreSQL's text.

- boolean ``t``/``f``; integers as is; ``real`` as the float4's shortest text
  (``3.4028235e+38``, not the widened double), ``double precision`` likewise,
  both with PostgreSQL's switch to exponent form (``1e+06`` for a real,
  ``1e+15`` for a double) and ``NaN``/``Infinity``/``-Infinity``/``-0``.
- ``numeric(p,s)`` exact with its scale (``1.5000``); unconstrained numeric
  and money as carried (exact text; money without its currency symbol).
- ``date``/``timestamp``/``timestamptz``/``time`` as PostgreSQL's text:
  ``2024-02-29 12:34:56.5``, ``timestamptz`` in UTC with ``+00``, years
  before 1 with `` BC``, ``infinity``/``-infinity``; ``timetz`` with its
  offset as ``+03``; ``interval`` as ``1 year 2 mons 3 days 04:05:06.5``.
- ``bytea`` as ``\\x`` hex; ``json``/``jsonb`` as JSON text (the Avro string
  is PostgreSQL's own text; from the JSON encoding it is re-serialized the
  way jsonb prints, so ``json`` whitespace is not kept); arrays as array
  literals (``{1,NULL,"a b"}``); everything else as the text carried.
"""

import base64
import datetime as dt
import json
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.codec.temporal import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, civil_from_days
from pgshovel2.consumer.pgfloat import float4_text, float8_text

Text = Callable[[Any], str]
BARE_KINDS = frozenset({"bool", "int2", "int4", "int8", "oid", "float4", "float8", "numeric", "money"})
"""Kinds whose text is shown without quotes (numbers and booleans)."""

_US_DAY, _US_HOUR, _US_MIN, _US_SEC = 86_400_000_000, 3_600_000_000, 60_000_000, 1_000_000
_EPOCH = dt.datetime(1970, 1, 1)
_ORDINAL_1970 = _EPOCH.toordinal()
_FIRST_DAY, _LAST_DAY = 1 - _ORDINAL_1970, dt.date.max.toordinal() - _ORDINAL_1970  # years 1 and 9999
_FIRST_US, _END_US = _FIRST_DAY * _US_DAY, (_LAST_DAY + 1) * _US_DAY


# -- numbers -------------------------------------------------------------------------------------

def numeric_text(unscaled: int, scale: int) -> str:
    """numeric(p, scale) of an Avro decimal's unscaled value, with exactly scale decimals."""
    digits = str(abs(unscaled))
    if scale > 0:
        digits = digits.rjust(scale + 1, "0")
        digits = digits[:-scale] + "." + digits[-scale:]
    return "-" + digits if unscaled < 0 else digits


# -- dates and times -----------------------------------------------------------------------------

def _date(days_1970: int) -> tuple[str, bool]:
    y, m, d = civil_from_days(days_1970)
    return (f"{1 - y:04d}-{m:02d}-{d:02d}", True) if y <= 0 else (f"{y:04d}-{m:02d}-{d:02d}", False)


def _clock(us: int) -> str:
    s, frac = divmod(us, _US_SEC)
    text = f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{text}.{frac:06d}".rstrip("0") if frac else text


def date_text(days_1970: int) -> str:
    """Avro date (days since 1970, int32 limits = ±infinity)."""
    if days_1970 in (INT32_MAX, INT32_MIN):
        return "infinity" if days_1970 == INT32_MAX else "-infinity"
    if _FIRST_DAY <= days_1970 <= _LAST_DAY:  # datetime's range: its C code is the fast way
        return dt.date.fromordinal(days_1970 + _ORDINAL_1970).isoformat()
    text, bc = _date(days_1970)
    return text + " BC" if bc else text


def time_text(us: int) -> str:
    """Avro time-micros (microseconds since midnight)."""
    return _clock(us)


def timestamp_text(us_1970: int, utc: bool) -> str:
    """Avro timestamp(-micros) / local-timestamp-micros (int64 limits = ±infinity); utc adds ``+00``."""
    if _FIRST_US <= us_1970 < _END_US:  # datetime's range (years 1 to 9999): its C code is the fast way
        text = (_EPOCH + dt.timedelta(microseconds=us_1970)).isoformat(" ")
        return (text.rstrip("0") if us_1970 % _US_SEC else text) + ("+00" if utc else "")
    if us_1970 in (INT64_MAX, INT64_MIN):
        return "infinity" if us_1970 == INT64_MAX else "-infinity"
    days, us = divmod(us_1970, _US_DAY)
    date, bc = _date(days)
    return f"{date} {_clock(us)}{'+00' if utc else ''}{' BC' if bc else ''}"


def _iso_timestamp_text(text: str, utc: bool) -> str:
    """The JSON encoding's ISO timestamp ("2024-02-29T12:34:56.500000Z", " BC" suffix) -> PostgreSQL's."""
    if text in ("infinity", "-infinity"):
        return text
    bc = text.endswith(" BC")
    body = (text[:-3] if bc else text).rstrip("Z")
    date, _, clock = body.partition("T")
    if "." in clock:
        clock = clock.rstrip("0").rstrip(".")
    return f"{date} {clock}{'+00' if utc else ''}{' BC' if bc else ''}"


def _iso_time_text(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


_TZ_HOURS = re.compile(r"([+-]\d\d):00$")


def timetz_text(iso: str) -> str:
    """The wire's ISO timetz ("12:34:56.5+03:00") -> PostgreSQL's ("12:34:56.5+03")."""
    return _TZ_HOURS.sub(r"\1", iso)


_ISO_INTERVAL = re.compile(r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
                           r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?")


def _part(value: int, unit: str, state: list[bool]) -> str:
    """One date field of the postgres IntervalStyle; state: [is_zero, is_before] (PostgreSQL's flags)."""
    if not value:
        return ""
    text = f"{'' if state[0] else ' '}{'+' if state[1] and value > 0 else ''}{value} {unit}{'s' if value != 1 else ''}"
    state[0], state[1] = False, value < 0
    return text


def interval_text(iso: str) -> str:
    """The wire's ISO 8601 interval ("P1Y2M3DT4H5M6.5S") -> PostgreSQL's ("1 year 2 mons 3 days 04:05:06.5")."""
    match = _ISO_INTERVAL.fullmatch(iso)
    if match is None:
        return iso
    y, mo, d, h, mi, s = match.groups()
    months = int(y or 0) * 12 + int(mo or 0)
    seconds = Decimal(s or 0)
    us = int(h or 0) * _US_HOUR + int(mi or 0) * _US_MIN + int(seconds * _US_SEC)
    years = int(months / 12)
    state = [True, False]
    out = _part(years, "year", state) + _part(months - years * 12, "mon", state) + _part(int(d or 0), "day", state)
    if state[0] or us:
        sign = "-" if us < 0 else ("+" if state[1] else "")
        hours, rest = divmod(abs(us), _US_HOUR)
        minutes, rest = divmod(rest, _US_MIN)
        secs, frac = divmod(rest, _US_SEC)
        clock = f"{hours:02d}:{minutes:02d}:{secs:02d}" + (f".{frac:06d}".rstrip("0") if frac else "")
        out += f"{'' if state[0] else ' '}{sign}{clock}"
    return out


# -- bytes, json, arrays -------------------------------------------------------------------------

def bytea_text(data: bytes) -> str:
    """bytea in PostgreSQL's hex format."""
    return "\\x" + data.hex()


_JSON = json.JSONEncoder(ensure_ascii=False).encode


def jsonb_text(value: Any) -> str:
    """A parsed JSON value (floats parsed as Decimal) serialized the way jsonb prints; an escaped
    json value (JsonValue, docs/wire.rst) is its own text."""
    if isinstance(value, JsonValue):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_JSON(k)}: {jsonb_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return format(value, "f")
    return _JSON(value)


_ARRAY_QUOTE = re.compile(r'[{}," \\\t\n\r\v\f]')


def _element(text: str) -> str:
    if not text or text.upper() == "NULL" or _ARRAY_QUOTE.search(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def array_text(items: list, element: Text) -> str:
    """An array literal as array_out writes it; nested lists are dimensions."""
    parts = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, list):
            parts.append(array_text(item, element))
        else:
            parts.append(_element(element(item)))
    return "{" + ",".join(parts) + "}"


# -- per column ----------------------------------------------------------------------------------

def _string_text(kind: str) -> Text:
    """Text of a value carried as a string (Avro string, JSON string)."""
    if kind == "interval":
        return interval_text
    if kind == "timetz":
        return timetz_text
    return str


def _json_scalar(kind: str) -> Text:
    if kind in ("int2", "int4", "int8", "oid", "numeric", "money"):
        return str
    if kind == "bool":
        return lambda v: "t" if v else "f"
    if kind in ("float4", "float8"):
        number = float4_text if kind == "float4" else float8_text
        return lambda v: v if isinstance(v, str) else number(float(v))
    if kind == "bytea":
        return lambda v: bytea_text(base64.b64decode(v))
    if kind in ("timestamp", "timestamptz"):
        utc = kind == "timestamptz"
        return lambda v: _iso_timestamp_text(v, utc)
    if kind == "time":
        return _iso_time_text
    if kind in ("json", "jsonb"):
        return jsonb_text
    if kind in ("interval", "timetz"):
        return _string_text(kind)
    return lambda v: v if isinstance(v, str) else jsonb_text(v)


def json_text(kind: str, is_array: bool) -> Text:
    """Text of a column's JSON-encoding value (kind: pgshovel2.catalog.Column.kind)."""
    scalar = _json_scalar(kind)
    if not is_array:
        return scalar
    return lambda v: v if isinstance(v, str) else array_text(v, scalar)  # box[] travels as its text


def guess_kind(value: Any) -> tuple[str, bool]:
    """(kind, is_array) of a JSON value of a column the set record does not know (older set versions)."""
    if isinstance(value, list):
        flat = list(value)
        while flat and (flat[0] is None or isinstance(flat[0], list)):  # the first scalar, any depth
            head = flat.pop(0)
            flat[:0] = head or []
        return guess_kind(flat[0] if flat else None)[0], True
    if isinstance(value, bool):
        return "bool", False
    if isinstance(value, int):
        return "int8", False
    if isinstance(value, float | Decimal):
        return "float8", False
    if isinstance(value, dict):
        return "jsonb", False
    return "text", False


def avro_text(schema: Any, kind: str) -> Text:
    """Text of a raw Avro datum of schema (the field's non-null type); kind: the column's kind."""
    schema, base, logical = _field_type(schema)
    if base == "array":
        element = avro_text(schema["items"], kind)
        return lambda v: array_text(v, element)
    if base == "boolean":
        return lambda v: "t" if v else "f"
    if base in ("int", "long"):
        if logical == "date":
            return date_text
        if logical == "time-micros":
            return time_text
        if logical in ("timestamp-micros", "local-timestamp-micros"):
            utc = logical == "timestamp-micros"
            return lambda v: timestamp_text(v, utc)
        return str
    if base == "float":
        return float4_text
    if base == "double":
        return float8_text
    if base == "bytes":
        if logical == "decimal":
            scale = schema.get("scale", 0)
            return lambda v: numeric_text(int.from_bytes(v, "big", signed=True), scale)
        return bytea_text
    if base == "string":
        return _string_text(kind)
    return lambda v: json.dumps(v, default=str, ensure_ascii=False)


def avro_bare(schema: Any, kind: str) -> bool:
    """True when values of the Avro field schema are numbers or booleans (shown unquoted)."""
    _, base, logical = _field_type(schema)
    if base in ("boolean", "int", "long", "float", "double"):
        return logical is None
    if base == "bytes":
        return logical == "decimal"
    return base == "string" and kind in ("numeric", "money")


def _field_type(schema: Any) -> tuple[dict, str, str | None]:
    """(schema as a dict, its type name, its logicalType) of an Avro field schema, through
    ``["null", T]`` unions and nested type definitions."""
    while True:
        if isinstance(schema, list):  # ["null", T]
            schema = next(s for s in schema if s != "null")
        if isinstance(schema, str):
            schema = {"type": schema}
        if not isinstance(schema["type"], dict | list):
            return schema, schema["type"], schema.get("logicalType")
        schema = schema["type"]


def kind_of_type(pg_type: str) -> str:
    """A kind (as far as text forms go) from a ``format_type`` name, for a column the set record lacks.

    Only the kinds carried as Avro strings matter here: interval, timetz,
    json/jsonb, money, numeric; anything else is "text".
    """
    base = pg_type.removesuffix("[]")
    if base.startswith("interval"):
        return "interval"
    if base.startswith("time") and not base.startswith("timestamp") and base.endswith("with time zone"):
        return "timetz"
    if base in ("json", "jsonb", "money"):
        return base
    return "numeric" if base.startswith("numeric") else "text"
