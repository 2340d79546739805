"""Fill a replica target from a Spark bootstrap (``pgshovel bootstrap --output DIR``).

The Parquet columns follow pgshovel2.codec.spark (WIRE.md's Avro mapping):
values go back to PostgreSQL as they are, except the forms Parquet had to
change: ``time`` is microseconds since midnight, and dates/timestamps at
WIRE.md's ±infinity sentinels (int32/int64 max and min) are ``infinity`` /
``-infinity``; arrays are one-dimensional there (pgshovel2.codec.spark: a
multi-dimensional value was flattened, lower bounds dropped). Rows are
inserted with ``execute_values`` in pages, in the caller's transaction.
"""

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from psycopg2 import sql
from psycopg2.extras import execute_values

from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.catalog import Column, Table
from pgshovel2.replica.sql import column_type
from pgshovel2.replica.values import adapter
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

PAGE = 2000
_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_INFINITE = {INT32_MAX: "infinity", INT32_MIN: "-infinity", INT64_MAX: "infinity", INT64_MIN: "-infinity"}


def _days(n: int) -> Any:
    return _INFINITE.get(n) or _EPOCH_DATE + datetime.timedelta(days=n)


def _micros(tz: bool) -> Callable[[int], Any]:
    def convert(n: int) -> Any:
        if n in _INFINITE:
            return _INFINITE[n]
        value = _EPOCH + datetime.timedelta(microseconds=n)
        return value.replace(tzinfo=datetime.UTC) if tz else value
    return convert


def _time(n: int) -> datetime.time:
    return (datetime.datetime.min + datetime.timedelta(microseconds=n)).time()


_SCALAR: dict[str, tuple[pa.DataType, Callable[[int], Any]]] = {
    "date": (pa.int32(), _days), "timestamp": (pa.int64(), _micros(False)),
    "timestamptz": (pa.int64(), _micros(True)), "time": (pa.int64(), _time)}


def column_values(array: pa.ChunkedArray | pa.Array, col: Column) -> list[Any]:
    """The Python values of one Parquet column, ready for psycopg2 (see the module doc)."""
    if col.kind not in _SCALAR:
        return array.to_pylist()
    raw_type, convert = _SCALAR[col.kind]
    if col.is_array:
        lists = array.cast(pa.list_(raw_type)).to_pylist()
        return [None if v is None else [None if x is None else convert(x) for x in v] for v in lists]
    return [None if v is None else convert(v) for v in array.cast(raw_type).to_pylist()]


def load(cur, manifest: Manifest, base: str | Path, tables: tuple[Table, ...]) -> int:
    """Insert every table's Parquet rows with cursor cur (no commit); returns the rows inserted."""
    by_name = {(t.schema, t.name): t for t in manifest.tables}
    total = 0
    for table in tables:
        dataset = ds.dataset(manifest.table_path(base, by_name[(table.schema, table.name)]), format="parquet")
        insert = sql.SQL("INSERT INTO {}.{} ({}) VALUES %s").format(
            sql.Identifier(table.schema), sql.Identifier(table.name),
            sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)).as_string(cur)
        # typed placeholders: a bare -0.0 would be a numeric constant, which has no negative zero
        template = "(" + ", ".join(f"%s::{column_type(c)}" for c in table.columns) + ")"
        arrays = {i: adapter(c, json_encoding=False) for i, c in enumerate(table.columns) if c.is_array}
        for batch in dataset.to_batches(batch_size=PAGE):  # streamed: memory stays at a page
            columns = [column_values(batch.column(c.name), c) for c in table.columns]
            for i, adapt in arrays.items():  # as array literals (exact floats), as replica apply sends them
                columns[i] = [adapt(v) for v in columns[i]]
            execute_values(cur, insert, list(zip(*columns, strict=True)), template=template, page_size=PAGE)
            total += batch.num_rows
    return total
