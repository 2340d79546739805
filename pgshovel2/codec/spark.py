"""Spark / Parquet columns of a table: derived from the Avro mapping of
:mod:`pgshovel2.codec.types` (WIRE.md), never a second type mapping.

A row reaches Spark in two steps:

1. physical: the Avro datum of each column (RowEncoder.convert with Avro,
   or a message decoded without logical types) as Spark accepts it from
   Python -- Avro int/long/float/double/boolean/string/bytes as is, decimals
   (unscaled big-endian bytes) as decimal.Decimal (precision <= 38; wider ones
   as their exact text);
2. logical: a SQL expression per column turns the Avro logical types into
   Spark types: date -> DATE (``date_from_unix_date``), timestamp-micros ->
   TIMESTAMP (UTC), local-timestamp-micros -> TIMESTAMP_NTZ; arrays element
   by element. The ±infinity sentinels of WIRE.md (int/long min/max) stay
   those extreme values.

time-micros stays a BIGINT of microseconds since midnight (Spark has no
time-of-day type); uuid, json, interval, timetz and the rest stay strings.
Requires ``spark.sql.session.timeZone=UTC`` (the jobs set it).

Arrays are one-dimensional Spark arrays of the element type (a Spark column
has one type; a PostgreSQL array column's values may have any number of
dimensions): a multi-dimensional value is flattened in PostgreSQL's storage
order (row-major, as ``unnest`` gives it) and lower bounds are dropped. The
exact value (docs/wire.rst) is in Kafka.
"""

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.codec.pgarray import flatten
from pgshovel2.codec.types import field_type

MAX_SPARK_PRECISION = 38
_PRIMITIVE = {"boolean": "BooleanType", "int": "IntegerType", "long": "LongType", "float": "FloatType",
              "double": "DoubleType", "string": "StringType", "bytes": "BinaryType"}
_LOGICAL_SQL = {"date": "date_from_unix_date({})", "timestamp-micros": "timestamp_micros({})",
                "local-timestamp-micros": "CAST(timestamp_micros({}) AS TIMESTAMP_NTZ)"}


@dataclass(frozen=True)
class SparkColumn:
    """One column: physical Spark type, its Python converter (None: identity) and logical SQL.

    name: the column's PostgreSQL name (also the Parquet column name);
    field: its Avro field name (the key of decoded Avro datums);
    sql: expression template over the physical column, ``{}`` = the column;
    aliases: the Avro field names of the column's former names (RENAME COLUMN while relayed),
    under which datums written before the rename carry its value;
    default: the value of rows written before the column was added (its Avro field's default;
    pgshovel2.relay.ddl.schema_change), None when they read as null.
    """

    name: str
    field: str
    physical: Any
    convert: Callable[[Any], Any] | None
    sql: str
    nullable: bool
    aliases: tuple[str, ...] = ()
    default: Any = None


def _decimal(scale: int, as_text: bool) -> Callable[[bytes], Any]:
    def convert(raw: bytes) -> Any:
        value = Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        return str(value) if as_text else value
    return convert


def _flat(value: Any) -> list:
    """An array datum (nested lists, or a bounded array ``{lower_bounds, elements}``) as one
    flat list in storage order."""
    if isinstance(value, dict):
        value = value["elements"]
    return flatten(value)


def _spark_type(avro: Any) -> tuple[Any, Callable[[Any], Any] | None, str]:
    """(physical Spark type, Python converter, SQL template) of a non-null Avro schema."""
    from pyspark.sql import types as st

    if isinstance(avro, list):  # an array column: [nested array, bounded-array record]
        avro = next(s for s in avro if isinstance(s, dict) and s["type"] == "array")
    if isinstance(avro, str):
        return getattr(st, _PRIMITIVE[avro])(), None, "{}"
    if avro["type"] == "array":
        items = [s for s in avro["items"] if s != "null" and not (isinstance(s, dict) and s["type"] == "array")][0]
        inner, conv, template = _spark_type(items)

        def convert(value: Any) -> list:
            flat = _flat(value)
            return flat if conv is None else [None if x is None else conv(x) for x in flat]
        sql = "{}" if template == "{}" else "transform({}, x -> " + template.format("x") + ")"
        return st.ArrayType(inner, containsNull=True), convert, sql
    logical = avro.get("logicalType")
    if logical == "decimal":
        wide = avro["precision"] > MAX_SPARK_PRECISION
        kind = st.StringType() if wide else st.DecimalType(avro["precision"], avro["scale"])
        return kind, _decimal(avro["scale"], wide), "{}"
    physical, _, _ = _spark_type(avro["type"])
    return physical, None, _LOGICAL_SQL.get(logical, "{}")


def columns(table: Table) -> list[SparkColumn]:
    """The Spark columns of a table's captured columns, in column order."""
    out = []
    for col in table.columns:
        physical, convert, sql = _spark_type(field_type(col).avro)
        out.append(SparkColumn(col.name, names.avro_name(col.name), physical, convert, sql, col.nullable,
                               tuple(names.avro_name(a) for a in col.aliases), col.default))
    return out


def from_field(field: dict[str, Any]) -> SparkColumn:
    """The column of one field of a registered value schema (pgshovel2.codec.avro: ``pgshovel.column``,
    a ``["null", ...]`` union when nullable, ``aliases`` after a rename). Raises KeyError or
    ValueError for a field pgshovel2 did not write."""
    avro, nullable = field["type"], False
    if isinstance(avro, list) and "null" in avro:
        nullable, branches = True, [b for b in avro if b != "null"]
        avro = branches[0] if len(branches) == 1 else branches
    physical, convert, sql = _spark_type(avro)
    return SparkColumn(field["pgshovel.column"], field["name"], physical, convert, sql, nullable,
                       tuple(field.get("aliases", ())), field.get("default"))


def _field_value(col: SparkColumn, datum: dict, fill: bool) -> Any:
    if col.field in datum:
        return datum[col.field]
    return next((datum[a] for a in col.aliases if a in datum), col.default if fill else None)


def physical_row(cols: list[SparkColumn], datum: list | dict, fill: bool = True) -> list:
    """Avro datums (a list in column order, or a dict by Avro field name) -> physical values. A
    column missing from a dict datum (written before the column was added) is its default
    (SparkColumn.default; None with fill false, for key datums); one written before a rename is
    read under its former name (SparkColumn.aliases)."""
    values = datum if isinstance(datum, list) else [_field_value(c, datum, fill) for c in cols]
    return [v if v is None or c.convert is None else c.convert(v) for c, v in zip(cols, values, strict=True)]


def quote(name: str) -> str:
    """A Spark SQL identifier in backquotes."""
    return "`" + name.replace("`", "``") + "`"


def logical_exprs(cols: list[SparkColumn]) -> list[str]:
    """SELECT expressions turning physical columns (named by column name) into logical ones."""
    return [f"{c.sql.format(quote(c.name))} AS {quote(c.name)}" for c in cols]


def physical_fields(cols: list[SparkColumn]) -> list:
    """StructFields of the physical columns."""
    from pyspark.sql import types as st

    return [st.StructField(c.name, c.physical, True) for c in cols]
