"""Iceberg schema evolution of the materialize job: the columns of a micro-batch and the
ALTER TABLE statements that make an Iceberg table hold them, before the batch's MERGE.

A set version (DDL mid-stream, docs/wire.rst "DDL on captured tables") gives the table's
value subject a new schema. The columns of a batch are those of the value schema of its
newest set version (header ``pgshovel.version``; the schema id is in each value's Confluent
header), plus the fields of the batch's older schemas that the newest one dropped (their
values still arrive in the batch's earlier rows). Against the Iceberg table:

- a new field whose former name (Avro ``aliases``) is an Iceberg column the batch does not
  carry any more: ``RENAME COLUMN`` (the relay records a rename by attnum, both backends);
- any other new field: ``ADD COLUMN`` (nullable; rows written before have null, as in
  PostgreSQL). A NOT NULL column added with a DEFAULT is refused with an error: its older rows
  hold the default in PostgreSQL, which this job does not write into Iceberg yet;
- a dropped column stays in the Iceberg table: rows written by later changes have null in it.

Each statement is its own Iceberg commit, made before the MERGE; a restart finds the table
already evolved and goes on (the statements are chosen by comparing names, so none repeats).
"""

import dataclasses
import logging
from typing import Any

from pgshovel2 import names, wire
from pgshovel2.bootstrap.manifest import BootstrapError
from pgshovel2.catalog import Table
from pgshovel2.codec import spark as spark_codec
from pgshovel2.codec.avro import envelope_row_schema
from pgshovel2.consumer.decode import Decoder
from pgshovel2.sparkjobs import changes

log = logging.getLogger(__name__)

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
                extra.append(dataclasses.replace(col, nullable=True))  # absent from the newer rows
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
                cols.append(spark_codec.from_field(field))
                known.add(field["name"])
    return cols


def _fields(spark, target: str) -> dict[str, Any]:
    return {f.name: f for f in spark.table(target).schema.fields if f.name != changes.POSITION}


def plan(existing: list[str], cols: list[spark_codec.SparkColumn], defaults: dict[str, Any],
         where: str) -> tuple[dict[str, str], list[spark_codec.SparkColumn]]:
    """(renames: former column name -> new name, added: the columns to add) that make a table of
    columns existing hold cols (batch_columns): a column of cols whose former name (Avro aliases)
    is an existing column cols do not carry is a rename, any other new one is added. defaults:
    Avro default per column name of the newest schema. Raises BootstrapError (naming where) for a
    column added NOT NULL with a default."""
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
        if defaults.get(col.name) is not None:
            raise BootstrapError(f"{where}: column {col.name!r} was added NOT NULL with default "
                                 f"{defaults[col.name]!r}; materialize cannot give the older rows that "
                                 "default yet (add it nullable, then SET NOT NULL)")
        added.append(col)
    return renames, added


def evolve(spark, target: str, cols: list[spark_codec.SparkColumn], defaults: dict[str, Any]) -> list[str]:
    """Rename or add the Iceberg columns that cols (batch_columns) hold and target lacks (:func:`plan`);
    returns the Iceberg columns cols do not hold (dropped: set to null by the batch's updates).
    Raises BootstrapError for a NOT NULL column added with a default."""
    renames, added = plan(list(_fields(spark, target)), cols, defaults, target)
    for former, new in renames.items():
        spark.sql(f"ALTER TABLE {target} RENAME COLUMN {spark_codec.quote(former)} TO {spark_codec.quote(new)}")
        log.info("%s: column %s renamed to %s", target, former, new)
    for col in added:
        kind = _logical_type(spark, col)
        spark.sql(f"ALTER TABLE {target} ADD COLUMN {spark_codec.quote(col.name)} {kind}")
        log.info("%s: column %s %s added", target, col.name, kind)
    carried = {c.name for c in cols}
    return [n for n in _fields(spark, target) if n not in carried]


def _logical_type(spark, col: spark_codec.SparkColumn) -> str:
    """The Spark SQL type of a column's logical values (what logical_exprs makes of it)."""
    from pyspark.sql import types as st

    empty = spark.createDataFrame([], st.StructType(spark_codec.physical_fields([col])))
    return empty.selectExpr(*spark_codec.logical_exprs([col])).schema.fields[0].dataType.simpleString()


def newest_defaults(schema_ids: list[int], decoder: Decoder, where: str, envelope: str = "row") -> dict[str, Any]:
    """Column name -> Avro default of the newest schema's fields that have one ({} without values)."""
    if not schema_ids:
        return {}
    schema = _row_schema(decoder.writer_schema(schema_ids[-1], where), envelope)
    return {f["pgshovel.column"]: f.get("default") for f in schema["fields"]}

