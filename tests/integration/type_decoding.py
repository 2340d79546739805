"""Turning decoded column values back into SQL by the wire spec alone (WIRE.md,
docs/wire.rst; no pgshovel2 code), and comparing them with the source rows in
PostgreSQL (test_types)."""

import base64
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

ESCAPE_KEY = "pgshovel.json"  # docs/wire.rst "json, jsonb"
INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1


@dataclass(frozen=True)
class Col:
    """A column as the decoders need it.

    pg_type: the column's type in SQL. elem: an array column's element type
    (the column's type, domains resolved, is an array of it), else None.
    json / bytea: the value (or an array's elements) is json/jsonb / bytea in
    the wire mapping. vector: int2vector/oidvector (input ``1 2``).
    text_only: the type refuses input: compare output texts.
    """

    name: str
    pg_type: str
    elem: str | None = None
    json: bool = False
    bytea: bool = False
    vector: bool = False
    text_only: bool = False


def lit(cur, value: str) -> str:
    return cur.mogrify("%s", (value,)).decode()


def is_escape(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ESCAPE_KEY), str)


def _shape(items: list) -> list[int]:
    shape = []
    while isinstance(items, list):
        shape.append(len(items))
        items = items[0] if items else None
    return shape


def _array(items: list, bounds: list[int] | None, leaf, col: Col) -> str:
    """SQL of a (nested) array of col's elements, lower bounds applied."""
    def build(level: list) -> str:
        return "ARRAY[" + ", ".join(build(x) if isinstance(x, list) else leaf(x) for x in level) + "]"

    expr = f"({build(items)})::{col.elem}[]" if items else f"ARRAY[]::{col.elem}[]"
    if bounds is not None:
        dims = "".join(f"[{lb}:{lb + n - 1}]" for lb, n in zip(bounds, _shape(items), strict=True))
        expr = f"('{dims}=' || ({expr})::text)::{col.elem}[]"
    if col.vector:
        return f"array_to_string({expr}, ' ')::{col.pg_type}"
    return f"({expr})::{col.pg_type}"


def _array_parts(value: Any) -> tuple[list, list[int] | None]:
    if isinstance(value, dict):
        return value["elements"], value["lower_bounds"]
    return value, None


def named_types(schema: Any, out: dict | None = None) -> dict:
    """Full name -> definition of the named records of an Avro schema."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for s in schema:
            named_types(s, out)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            if "namespace" in schema:
                out[f"{schema['namespace']}.{schema['name']}"] = schema
            for f in schema["fields"]:
                named_types(f["type"], out)
        elif schema.get("type") == "array":
            named_types(schema["items"], out)
    return out


def _branch(schema: Any, value: Any, named: dict) -> Any:
    """The union branch a decoded value was written with (list: array, dict: record)."""
    if not isinstance(schema, list):
        return named.get(schema, schema) if isinstance(schema, str) else schema
    for s in (named.get(s, s) if isinstance(s, str) else s for s in schema if s != "null"):
        kind = s.get("type") if isinstance(s, dict) else s
        if isinstance(value, list) == (kind == "array") and isinstance(value, dict) == (kind == "record"):
            return s
    raise AssertionError(f"no branch of {schema} for {value!r}")


def avro_sql(cur, value: Any, schema: Any, col: Col, named: dict) -> str:
    """SQL expression for a raw Avro value (read without logical types) of col."""
    if value is None:
        return f"NULL::{col.pg_type}"
    schema = _branch(schema, value, named)
    if col.elem is None:
        return _avro_leaf(cur, value, schema, col.pg_type, col)
    if schema.get("type") == "record":
        schema = next(f["type"] for f in schema["fields"] if f["name"] == "elements")
    leaf = [s for s in schema["items"] if s != "null" and not (isinstance(s, dict) and s.get("type") == "array")][0]
    items, bounds = _array_parts(value)

    def element(v: Any) -> str:
        return f"NULL::{col.elem}" if v is None else _avro_leaf(cur, v, leaf, col.elem, col)
    return _array(items, bounds, element, col)


def _avro_leaf(cur, value: Any, avro_type: Any, pg_type: str, col: Col) -> str:
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    base = avro_type["type"] if isinstance(avro_type, dict) else avro_type
    if col.text_only:
        return lit(cur, value)
    if logical == "date":
        if abs(value) >= INT_MAX:
            return f"'{'' if value > 0 else '-'}infinity'::{pg_type}"
        return f"('1970-01-01'::date + {value})::{pg_type}"
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        kind = "timestamptz" if logical == "timestamp-micros" else "timestamp"
        if abs(value) >= LONG_MAX:
            return f"'{'' if value > 0 else '-'}infinity'::{kind}"
        local = f"('1970-01-01'::timestamp + {_span(value)})"
        return f"({local} AT TIME ZONE 'UTC')::{pg_type}" if kind == "timestamptz" else f"{local}::{pg_type}"
    if logical == "time-micros":
        return f"('00:00'::time + {_span(value)})::{pg_type}"
    if logical == "decimal":
        unscaled = int.from_bytes(value, "big", signed=True)
        return f"'{Decimal(unscaled).scaleb(-avro_type['scale'])}'::{pg_type}"
    if base == "bytes":
        return f"'\\x{value.hex()}'::{pg_type}"
    if base in ("float", "double"):
        text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(repr(value), repr(value))
        return f"'{text}'::{pg_type}"
    if base == "boolean":
        return f"{str(value).lower()}::{pg_type}"
    if base in ("int", "long"):
        return f"({value})::{pg_type}"
    return f"{lit(cur, value)}::{pg_type}"


def json_sql(cur, value: Any, col: Col) -> str:
    """SQL expression for a value of col in the JSON encoding."""
    if value is None:
        return f"NULL::{col.pg_type}"
    if col.elem is None:
        return _json_leaf(cur, value, col.pg_type, col)
    items, bounds = _array_parts(value)

    def element(v: Any) -> str:
        return f"NULL::{col.elem}" if v is None else _json_leaf(cur, v, col.elem, col)
    return _array(items, bounds, element, col)


def _json_leaf(cur, value: Any, pg_type: str, col: Col) -> str:
    if col.text_only:
        return lit(cur, value)
    if col.json:
        text = value[ESCAPE_KEY] if is_escape(value) else json.dumps(value)
        return f"{lit(cur, text)}::{pg_type}"
    if col.bytea:
        return f"'\\x{base64.b64decode(value).hex()}'::{pg_type}"
    if isinstance(value, bool):
        return f"{str(value).lower()}::{pg_type}"
    if isinstance(value, int | float):
        return f"'{value!r}'::{pg_type}"
    return f"{lit(cur, value)}::{pg_type}"


def comparable(col: Col) -> str:
    """The type both sides are cast to before comparing their text (json keeps its spacing)."""
    if col.text_only:
        return "text"
    if col.pg_type == "json":
        return "jsonb"
    if col.pg_type == "json[]":
        return "jsonb[]"
    return col.pg_type


def _span(micros: int) -> str:
    """An exact interval of micros microseconds, from fields each PostgreSQL 14's interval
    input takes (it refuses '86399999999 microseconds'); days of 24 hours (added to a
    timestamp without time zone)."""
    days, rest = divmod(micros, 86_400_000_000)
    secs, micros = divmod(rest, 1_000_000)
    return f"('{days} days'::interval + '{secs} seconds'::interval + '{micros} microseconds'::interval)"


def compare(db, schema: str, table: str, row_id: int, cols: list[Col], exprs: dict[str, str]) -> list[str]:
    """Columns whose stored value (text) differs from its decoded expression's."""
    bad = []
    with db.cursor() as cur:
        cur.execute(f"SET search_path = \"{schema}\", public")
        for col in cols:
            cast = comparable(col)
            cur.execute(f"SELECT {col.name}::{cast}::text, ({exprs[col.name]})::{cast}::text "
                        f"FROM {table} WHERE id = %s", (row_id,))
            stored, decoded = cur.fetchone()
            if stored != decoded:
                bad.append(f"{col.name} ({col.pg_type}): stored {stored!r} != decoded {decoded!r}")
        cur.execute("RESET ALL")
    return bad
