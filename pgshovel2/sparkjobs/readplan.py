"""The plan of a bootstrap's parallel reads of one exported snapshot.

The snapshot is exported by the set's backend (pgshovel2.backends.export: its handoff is
the backend's) and stays open while the readers run: each JDBC partition adopts it with
``SET TRANSACTION SNAPSHOT``, so every partition reads the same state.
"""

import logging
import math
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.catalog import Table
from pgshovel2.codec.controls import ColumnControls

log = logging.getLogger(__name__)
INTEGER_KINDS = ("int2", "int4", "int8")
# Types whose JDBC values equal the codec's (WIRE.md) values exactly: such tables are read as plain
# columns (no Python per row). The rest go through pgshovel2.encode_row and the relay's codec.
NATIVE_KINDS = frozenset({"bool", "int2", "int4", "int8", "float4", "float8", "text", "varchar", "bpchar",
                          "name", "bytea"})
PK_ALIAS, ROW_ALIAS = "__pgshovel_pk", "__pgshovel_row"


@dataclass(frozen=True)
class ReadPlan:
    """How one table is read: a query and its key-range partitions.

    query: a parenthesized subquery with columns __pgshovel_pk (the first key
    column, or NULL) and either __pgshovel_row (the captured columns in trigger
    form, JSON text, from pgshovel2.encode_row: exactly what the relay encodes)
    or, when native, the captured columns themselves under their own names.
    column: the partition column (None: one partition); lower/upper: min and
    max of the first key column in the snapshot; partitions: how many. controls: the table's column
    controls (codec.controls; table is then the controlled one, and the rows are read encoded: the
    controls apply to them in Spark before any value is written).
    """

    table: Table
    query: str
    column: str | None
    lower: int
    upper: int
    partitions: int
    native: bool = False
    controls: ColumnControls | None = None


def is_native(table: Table) -> bool:
    """True when every captured column is a NATIVE_KINDS scalar (readable as plain JDBC columns)."""
    return all(c.kind in NATIVE_KINDS and not c.is_array for c in table.columns)


def _select_list(table: Table, native: bool, encode_row: str) -> str:
    if native:
        return ", ".join(f"__pgshovel2_row__.{names.quote_ident(c.name)}" for c in table.columns)
    attnums = "{" + ",".join(str(c.attnum) for c in table.columns) + "}"
    return f"{encode_row}(__pgshovel2_row__, '{attnums}'::int2[])::text AS {ROW_ALIAS}"


def plan(snap: ExportedSnapshot, table: Table, partition_rows: int, max_partitions: int,
         native: bool = False) -> ReadPlan:
    """The read plan of table in snap: key ranges sized from pg_class.reltuples (the key range
    when the table was never analyzed) and min/max of the first key column. native: read plain
    columns when the table allows it (:func:`is_native`).

    Raises BootstrapError when the table cannot be read or the exported snapshot ended.
    """
    try:
        result = _plan(snap, table, partition_rows, max_partitions, native and is_native(table))
    except psycopg2.Error as exc:
        raise snap.ended(exc) from exc
    log.info("table %s: read as %s", table.qualified, "plain columns" if result.native else "encoded rows")
    return result


def _plan(snap: ExportedSnapshot, table: Table, partition_rows: int, max_partitions: int, native: bool) -> ReadPlan:
    snap.check_table(table)
    key = next((c for c in table.columns if table.key and c.name == table.key[0]), None)
    usable = key is not None and key.kind in INTEGER_KINDS and not key.is_array
    # The row alias must not be a column name (a column named like it would be passed instead).
    pk = f"__pgshovel2_row__.{names.quote_ident(key.name)}" if usable else "NULL::int8"
    query = (f"(SELECT {pk} AS {PK_ALIAS}, {_select_list(table, native, snap.encode_row)} "
             f"FROM {table.sql_name} __pgshovel2_row__) AS pgshovel_bootstrap")
    if not usable:
        log.info("table %s: no integer key column to split on: one partition", table.qualified)
        return ReadPlan(table, query, None, 0, 0, 1, native)
    with snap.conn.cursor() as cur:
        cur.execute("SELECT reltuples::int8 FROM pg_class WHERE oid = %s::regclass", (table.sql_name,))
        estimate = cur.fetchone()[0]  # -1: never analyzed
        cur.execute(sql.SQL("SELECT min({k}), max({k}) FROM {t}").format(
            k=sql.Identifier(key.name), t=sql.Identifier(*table.relation)))
        lower, upper = cur.fetchone()
    if lower is None:
        log.info("table %s is empty in the snapshot: one partition", table.qualified)
        return ReadPlan(table, query, None, 0, 0, 1, native)
    if estimate < 0:
        estimate = upper - lower + 1  # no statistics yet: assume a dense key
    parts = max(1, min(max_partitions, math.ceil(estimate / partition_rows), upper - lower + 1))
    log.info("table %s: ~%d rows, %d partition(s) on %s in [%d, %d]", table.qualified, estimate,
             parts, key.name, lower, upper)
    return ReadPlan(table, query, PK_ALIAS if parts > 1 else None, lower, upper, parts, native)
