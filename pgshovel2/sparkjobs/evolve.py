"""Iceberg schema evolution of the materialize job: the columns of a micro-batch and the
ALTER TABLE statements that make an Iceberg table hold them, before the batch's MERGE.

A set version (DDL mid-stream, docs/wire.rst "DDL on captured tables") gives the table's
value subject a new schema. The columns of a batch are those of the value schema of its
newest set version (header ``pgshovel.version``; the schema id is in each value's Confluent
header), plus the fields of the batch's older schemas that the newest one dropped (their
values still arrive in the batch's earlier rows). Against the Iceberg table:

- a new field whose former name (Avro ``aliases``) is an Iceberg column the batch does not
  carry any more: ``RENAME COLUMN`` (the relay records a rename by attnum, both backends);
- any other new field: ``ADD COLUMN`` (nullable in Iceberg). The rows already there get the
  field's default (the value PostgreSQL gives them; a column added with a DEFAULT, see
  pgshovel2.relay.ddl.schema_change) by an ``UPDATE ... WHERE c IS NULL``, recorded first in the
  table property ``pgshovel.fill`` so that a restart between the two commits still makes it;
  a batch's own rows written before the ADD read the default too (spark_codec.physical_row);
- a dropped column stays in the Iceberg table: rows written by later changes have null in it.

Each statement is its own Iceberg commit, made before the MERGE; a restart finds the table
already evolved and goes on (the statements are chosen by comparing names, so none repeats).
"""

import dataclasses
import json
import logging
from typing import Any

from pgshovel2 import names, wire
from pgshovel2.catalog import Table
from pgshovel2.codec import spark as spark_codec
from pgshovel2.codec.avro import envelope_row_schema
from pgshovel2.consumer.decode import Decoder
from pgshovel2.sparkjobs import changes, iceberg

log = logging.getLogger(__name__)
# Iceberg table property: defaults still to give the rows existing when their columns were added.
FILL_PROPERTY = "pgshovel.fill"

_VERSION_SQL = (f"coalesce(try_cast(cast(try_element_at(filter(headers, h -> h.key = '{wire.VERSION}'), 1).value "
                "AS STRING) AS INT), 0)")
_SCHEMA_ID_SQL = "cast(conv(hex(substring(value, 2, 4)), 16, 10) AS BIGINT)"


def batch_schemas(batch) -> dict[str, list[int]]:
    """Topic -> the value schema ids of the batch's Avro values, oldest set version first
    (a Kafka micro-batch DataFrame with topic, value, headers)."""
    rows = (batch.filter("value IS NOT NULL AND substring(value, 1, 1) = X'00'")
            .selectExpr("topic", f"{_VERSION_SQL} AS version", f"{_SCHEMA_ID_SQL} AS schema_id")
            .distinct().collect())
    out: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda r: (r["version"], r["schema_id"])):
        ids = out.setdefault(row["topic"], [])
        if row["schema_id"] not in ids:
            ids.append(row["schema_id"])
    return out


def batch_versions(batch) -> dict[str, list[int]]:
    """Topic -> the set versions (header ``pgshovel.version``) of the batch's values, oldest first (a
    Kafka micro-batch DataFrame with topic, value, headers): a JSON set's columns come from them."""
    rows = (batch.filter("value IS NOT NULL").selectExpr("topic", f"{_VERSION_SQL} AS version")
            .distinct().collect())
    out: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda r: r["version"]):
        out.setdefault(row["topic"], []).append(row["version"])
    return out


def versions_table(tables: list[Table]) -> Table:
    """The table a batch of several set versions is read as (tables: the table as each defines it,
    oldest first): the newest's columns, then the older columns it dropped (their values still
    arrive in the batch's earlier rows), as batch_columns does for Avro."""
    newest = tables[-1]
    known = {c.name for c in newest.columns} | {a for c in newest.columns for a in c.aliases}
    extra = []
    for older in reversed(tables[:-1]):
        for col in older.columns:
            if col.name not in known:
                extra.append(dataclasses.replace(col, nullable=True, default=None))  # null in the newer rows
                known.add(col.name)
    return dataclasses.replace(newest, columns=newest.columns + tuple(extra)) if extra else newest


def _row_schema(schema: dict[str, Any], envelope: str) -> dict[str, Any]:
    """The row record of a value schema: the schema itself, or a Debezium envelope's before/after."""
    return envelope_row_schema(schema) if envelope == "debezium" else schema


def batch_columns(table: Table, schema_ids: list[int], decoder: Decoder,
                  envelope: str = "row") -> list[spark_codec.SparkColumn]:
    """The columns a batch of table carries (schema_ids: batch_schemas' ids of its topic): the
    newest schema's fields, then older fields it dropped; the key columns of the set's table
    when the batch holds no value (deletes only). Raises ConsumerError when the registry fails."""
    if not schema_ids:
        return [c for c in spark_codec.columns(table) if c.name in table.key]
    schemas = [_row_schema(decoder.writer_schema(i, f"the value schema of {table.qualified}"), envelope)
               for i in schema_ids]
    cols = [spark_codec.from_field(f) for f in schemas[-1]["fields"]]
    known = {c.field for c in cols} | {a for c in cols for a in c.aliases}
    for schema in reversed(schemas[:-1]):
        for field in schema["fields"]:
            if field["name"] not in known:
                cols.append(dataclasses.replace(spark_codec.from_field(field), default=None))  # null in newer rows
                known.add(field["name"])
    return cols


def _fields(spark, target: str) -> dict[str, Any]:
    return {f.name: f for f in spark.table(target).schema.fields if f.name != changes.POSITION}


def plan(existing: list[str],
         cols: list[spark_codec.SparkColumn]) -> tuple[dict[str, str], list[spark_codec.SparkColumn]]:
    """(renames: former column name -> new name, added: the columns to add) that make a table of
    columns existing hold cols (batch_columns): a column of cols whose former name (Avro aliases)
    is an existing column cols do not carry is a rename, any other new one is added (its rows
    hold SparkColumn.default)."""
    carried = {c.name for c in cols}
    renames: dict[str, str] = {}
    added = []
    for col in cols:
        if col.name in existing:
            continue
        former = next((n for n in existing if n not in carried and n not in renames
                       and names.avro_name(n) in col.aliases), None)
        if former is not None:
            renames[former] = col.name
            continue
        added.append(col)
    return renames, added


def evolve(spark, target: str, cols: list[spark_codec.SparkColumn]) -> list[str]:
    """Rename or add the Iceberg columns that cols (batch_columns) hold and target lacks (:func:`plan`),
    giving the rows already there an added column's default (:func:`fill`); returns the Iceberg
    columns cols do not hold (dropped: set to null by the batch's updates)."""
    renames, added = plan(list(_fields(spark, target)), cols)
    for former, new in renames.items():
        spark.sql(f"ALTER TABLE {target} RENAME COLUMN {spark_codec.quote(former)} TO {spark_codec.quote(new)}")
        log.info("%s: column %s renamed to %s", target, former, new)
    fills = {c.name: c.default for c in added if c.default is not None}
    if fills:  # recorded before the columns exist: a restart between ADD and UPDATE fills at start
        fills = {**pending_fills(iceberg.properties(spark, target)), **fills}
        _set_fills(spark, target, fills)
    for col in added:
        kind = _logical_type(spark, col)
        spark.sql(f"ALTER TABLE {target} ADD COLUMN {spark_codec.quote(col.name)} {kind}")
        log.info("%s: column %s %s added", target, col.name, kind)
    if fills:
        fill(spark, target, fills)
    carried = {c.name for c in cols}
    return [n for n in _fields(spark, target) if n not in carried]


def fill(spark, target: str, pending: dict[str, Any]) -> None:
    """Give the rows of target that existed when a column was added the value PostgreSQL gives them,
    then clear table property FILL_PROPERTY. pending: {column: Avro default}, the property's content
    (:func:`pending_fills`). Called by :func:`evolve` after it adds columns, and for every table when
    a job starts (a driver killed between the ADD COLUMN and the UPDATE). Idempotent: before the
    batch's MERGE only those rows hold null there."""
    for name, default in pending.items():
        column = spark_codec.quote(name)
        spark.sql(f"UPDATE {target} SET {column} = {_literal(default)} WHERE {column} IS NULL")
        log.info("%s: rows older than column %s given its default %r", target, name, default)
    if pending:
        spark.sql(f"ALTER TABLE {target} UNSET TBLPROPERTIES ('{FILL_PROPERTY}')")


def pending_fills(properties: dict[str, str]) -> dict[str, Any]:
    """{column: Avro default} of the fills recorded in a table's properties (iceberg.properties) and
    not yet made; {} when none."""
    return json.loads(properties.get(FILL_PROPERTY, "{}"))


def _set_fills(spark, target: str, fills: dict[str, Any]) -> None:
    text = json.dumps(fills).replace("\\", "\\\\").replace("'", "\\'")  # ASCII; Spark unescapes \\ and \'
    spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ('{FILL_PROPERTY}' = '{text}')")


def _literal(value: Any) -> str:
    """A Spark SQL literal of an Avro default (boolean, int, long, float, double or string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"


def _logical_type(spark, col: spark_codec.SparkColumn) -> str:
    """The Spark SQL type of a column's logical values (what logical_exprs makes of it)."""
    from pyspark.sql import types as st

    empty = spark.createDataFrame([], st.StructType(spark_codec.physical_fields([col])))
    return empty.selectExpr(*spark_codec.logical_exprs([col])).schema.fields[0].dataType.simpleString()
