"""Drift audit: a set's source tables against their materialized Iceberg tables (and the
round logic :mod:`pgshovel2.ops.audit_kafka` shares).

Each table is compared by key-range checksums: rows are grouped into buckets
of the first key column (integer keys: ``key // bucket_rows``; other keys: a
hash), each bucket's checksum is the SHA-256 of its rows in key order, and
only buckets whose checksums differ are compared row by row, naming the keys
whose rows differ (missing on either side or other values).

The source is read in one REPEATABLE READ snapshot (every table at one
position); the Iceberg tables (Hadoop catalog layout ``WAREHOUSE/<set>/<schema>/
<table>/metadata``, written by ``materialize --format iceberg``) are read with
PyIceberg at their current snapshot. While writes go on the two are not at the
same position: with ``rounds`` > 1 the comparison is repeated after ``pause``
seconds and only keys that differ in every round with the same source row are
reported (a change still in flight converges once the materialize job merged
it; a change made behind the relay's back never does). Values are compared as
Python values (psycopg2 vs Arrow): exact for integers, floats, text, bool and
bytes; other types may differ in form.
"""

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.errors import PgshovelError
from pgshovel2.setrecord import SetRecord

Row = tuple[Any, ...]


class AuditError(PgshovelError):
    """The audit cannot run (no Iceberg table, no key, unreadable source)."""


@dataclass(frozen=True)
class TableDrift:
    """Result of one table: buckets compared, buckets and keys that differ (key tuples)."""

    table: str
    rows: int
    buckets: int
    differing_buckets: int
    keys: list[tuple]
    point: str = ""  # where the round compared (Kafka: the source's txid snapshot), for the report


def metadata_file(warehouse: str, set_name: str, table: Table) -> Path:
    """The current metadata file of the table's Iceberg table (version-hint.text). Raises AuditError."""
    folder = Path(warehouse) / set_name / table.schema / table.name / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        raise AuditError(f"no Iceberg table for {table.qualified} of set {set_name!r} under {warehouse}")
    return folder / f"v{hint.read_text().strip()}.metadata.json"


def iceberg_rows(warehouse: str, set_name: str, table: Table) -> dict[tuple, Row]:
    """key tuple -> row (captured columns in order) of the Iceberg table, read by PyIceberg."""
    from pyiceberg.table import StaticTable

    cols = [c.name for c in table.columns]
    static = StaticTable.from_metadata(str(metadata_file(warehouse, set_name, table)))
    data = static.scan(selected_fields=tuple(cols)).to_arrow().to_pylist()
    return {tuple(r[k] for k in table.key): tuple(_norm(r[c]) for c in cols) for r in data}


def source_rows(cur, table: Table) -> dict[tuple, Row]:
    """key tuple -> row of the source table in cur's snapshot."""
    cols = [c.name for c in table.columns]
    cur.execute(f"SELECT {', '.join(names.quote_ident(c) for c in cols)} FROM {table.qualified}")
    index = [cols.index(k) for k in table.key]
    return {tuple(r[i] for i in index): tuple(_norm(v) for v in r) for r in cur.fetchall()}


def _norm(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _bucket(key: tuple, bucket_rows: int) -> Any:
    first = key[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return first // bucket_rows
    return hashlib.sha256(repr(first).encode()).digest()[0]


def checksums(rows: dict[tuple, Row], bucket_rows: int) -> dict[Any, str]:
    """bucket -> SHA-256 of the bucket's (key, row) pairs in key order."""
    buckets: dict[Any, list] = {}
    for key, row in rows.items():
        buckets.setdefault(_bucket(key, bucket_rows), []).append((key, row))
    return {b: hashlib.sha256(repr(sorted(items, key=lambda kv: repr(kv[0]))).encode()).hexdigest()
            for b, items in buckets.items()}


def differing_keys(source: dict[tuple, Row], target: dict[tuple, Row], bucket_rows: int) -> tuple[int, int, set]:
    """(buckets, differing buckets, keys whose rows differ) of two tables."""
    a, b = checksums(source, bucket_rows), checksums(target, bucket_rows)
    bad = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    keys = {k for k in source.keys() | target.keys()
            if _bucket(k, bucket_rows) in bad and source.get(k) != target.get(k)}
    return len(a.keys() | b.keys()), len(bad), keys


def audit(record: SetRecord, warehouse: str, rounds: int = 3, pause: float = 5.0,
          bucket_rows: int = 1000) -> list[TableDrift]:
    """Compare every table of the set with its Iceberg table (see the module docstring).
    Raises AuditError for a table without key or Iceberg table, psycopg2.Error from the source."""
    require_keys(record)
    return in_rounds(lambda: _round(record, warehouse, bucket_rows), rounds, pause)


def require_keys(record: SetRecord) -> None:
    """Raises AuditError naming the first table of the set without a key (rows cannot be paired)."""
    for table in record.tables:
        if not table.key:
            raise AuditError(f"table {table.qualified} of set {record.name!r} has no key: nothing to "
                             "compare rows by")


Round = Callable[[], tuple[list[TableDrift], dict[str, dict]]]


def in_rounds(round_: Round, rounds: int, pause: float) -> list[TableDrift]:
    """Run round_ (-> (drift per table, table -> {differing key: its source row})) rounds times,
    pause seconds apart; a key is kept only when it differs in every round with the same source
    row. Returns the last round's drift with the kept keys."""
    suspects: dict[str, dict] | None = None
    results: list[TableDrift] = []
    for round_no in range(max(1, rounds)):
        if round_no:
            time.sleep(pause)
        results, found = round_()
        suspects = found if suspects is None else {
            t: {k: v for k, v in found.get(t, {}).items() if suspects.get(t, {}).get(k, object()) == v}
            for t in found}
    return [TableDrift(r.table, r.rows, r.buckets, r.differing_buckets, sorted((suspects or {}).get(r.table, {})),
                       r.point)
            for r in results]


def _round(record: SetRecord, warehouse: str, bucket_rows: int) -> tuple[list[TableDrift], dict]:
    conn = psycopg2.connect(record.dsn)
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            sources = {t.qualified: source_rows(cur, t) for t in record.tables}
        conn.rollback()
    finally:
        conn.close()
    results, found = [], {}
    for table in record.tables:
        source = sources[table.qualified]
        buckets, bad, keys = differing_keys(source, iceberg_rows(warehouse, record.name, table), bucket_rows)
        results.append(TableDrift(table.qualified, len(source), buckets, bad, sorted(keys)))
        found[table.qualified] = {k: source.get(k) for k in keys}
    return results, found


def report(results: Iterable[TableDrift]) -> list[str]:
    """One line per table, then one per differing key."""
    lines = []
    for r in results:
        at = f" at {r.point}" if r.point else ""
        lines.append(f"{r.table}{at}: {r.rows} rows, {r.buckets} buckets, {r.differing_buckets} differing, "
                     f"{len(r.keys)} differing key(s)")
        lines += [f"  differs: {r.table} key {list(k)}" for k in r.keys]
    return lines
