"""JSON-encoding values back to the Avro datum of the same column (docs/wire.rst type table).

A JSON set's message carries each column in its JSON form; the Spark jobs turn Avro datums into
Spark values (pgshovel2.codec.spark), so a JSON value is first given the physical Avro form the
Avro encoding would have written for the same source value -- one type mapping
(pgshovel2.codec.types), read backwards:

- date ``"YYYY-MM-DD"`` (``" BC"`` suffix, ``"infinity"``) -> days since 1970 (int32 limits for
  ±infinity); timestamp / timestamptz ISO 8601 (``Z``; ``" BC"``) -> microseconds since 1970
  (int64 limits); time ``"HH:MM:SS.ffffff"`` -> microseconds since midnight;
- numeric(p,s) (an exact decimal string) -> unscaled big-endian bytes; bytea (base64) -> bytes;
- float ``"NaN"``/``"Infinity"``/``"-Infinity"`` -> float; json/jsonb (embedded, or the escape
  ``JsonValue``) -> its JSON text (an embedded value re-serialized: jsonb's own spacing, a
  json value's whitespace is lost, jsonb numbers as written in the message);
- arrays element by element, a bounded array ``{lower_bounds, elements}`` kept as such;
- every other form (strings, numbers, booleans) is already the Avro datum.

Raises ValueError naming the column for a value that is not a JSON form of its type.
"""

import base64
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import temporal
from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.codec.pgarray import depth, map_leaves
from pgshovel2.codec.types import JSON_KINDS, field_type
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

Convert = Callable[[Any], Any]
_US_DAY = 86_400_000_000


def _date(text: str) -> int:
    if text in ("infinity", "-infinity"):
        return INT32_MAX if text == "infinity" else INT32_MIN
    bc = text.endswith(" BC")
    y, m, d = (int(p) for p in (text[:-3] if bc else text).split("-"))
    return temporal.days_from_civil(1 - y if bc else y, m, d)


def _timestamp(text: str) -> int:
    if text in ("infinity", "-infinity"):
        return INT64_MAX if text == "infinity" else INT64_MIN
    bc = text.endswith(" BC")
    date, sep, clock = (text[:-3] if bc else text).removesuffix("Z").partition("T")
    if not sep:
        raise ValueError("no 'T' between date and time")
    return _date(f"{date} BC" if bc else date) * _US_DAY + temporal.time_from_text(clock)


def _float(value: Any) -> float:
    return float(value)


def _json_text(value: Any) -> str:
    return value.text if isinstance(value, JsonValue) else json.dumps(value, ensure_ascii=False)


def _scalar(col: Column) -> Convert | None:
    kind = col.kind
    if kind in ("float4", "float8"):
        return _float
    if kind == "date":
        return _date
    if kind in ("timestamp", "timestamptz"):
        return _timestamp
    if kind == "time":
        return temporal.time_from_text
    if kind == "bytea":
        return base64.b64decode
    if kind in JSON_KINDS:
        return _json_text
    element = field_type(replace(col, is_array=False))
    if kind == "numeric" and not isinstance(element.avro, str):
        return element.to_avro
    return None


def _array(element: Convert | None) -> Convert | None:
    if element is None:
        return None

    def convert(value: Any) -> Any:
        bounded = isinstance(value, dict)
        items = value["elements"] if bounded else value
        out = map_leaves(items, depth(items), element)
        return {"lower_bounds": value["lower_bounds"], "elements": out} if bounded else out
    return convert


def converter(col: Column) -> Convert | None:
    """JSON form -> Avro datum of col's values (never called with None); None: identity."""
    if col.is_array and isinstance(field_type(col).avro, str):  # an array travelling as its text
        return None
    scalar = _scalar(col)
    return _array(scalar) if col.is_array else scalar


def datum_reader(table: Table) -> Callable[[dict[str, Any]], list]:
    """A function: a JSON message's row object (column name -> JSON form) -> the Avro datums of
    table's columns, in column order (a column the object lacks is None; one it has under a
    former name, Column.aliases, is read there). Raises ValueError
    naming the column of a value that is not a JSON form of its type."""
    return datum_reader_of(table.columns)


def datum_reader_of(columns: list[Column]) -> Callable[[dict[str, Any], bool], list]:
    """:func:`datum_reader` of these columns; read(row, fill): a column absent from row (written
    before the column was added) is its Column.default with fill, else None."""
    convs = [(c.name, (c.name, *c.aliases), converter(c), c.default) for c in columns]

    def read(row: dict[str, Any], fill: bool = False) -> list:
        out = []
        for name, keys, conv, default in convs:  # a row written before a RENAME COLUMN has the former name
            value = next((row[k] for k in keys if k in row), default if fill else None)
            try:
                out.append(value if value is None or conv is None else conv(value))
            except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
                raise ValueError(f"column {name!r}: {value!r} is not a JSON form of its type ({exc})") from exc
        return out
    return read
