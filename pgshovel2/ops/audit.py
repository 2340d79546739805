"""Drift audit: what the audits against Iceberg (:mod:`pgshovel2.ops.audit_iceberg`) and Kafka
(:mod:`pgshovel2.ops.audit_kafka`) share -- key-range checksums, rounds and the report.

Each table is compared by key-range checksums: rows are grouped into buckets
of the first key column (integer keys: ``key // bucket_rows``; other keys: a
hash), each bucket's checksum is the SHA-256 of its rows in key order, and
only buckets whose checksums differ are compared row by row, naming the keys
whose rows differ (missing on either side or other values). With ``rounds``
> 1 a comparison is repeated after ``pause`` seconds and only keys that differ
in every round with the same source row are reported.
"""

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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
    point: str = ""  # where the round compared (the source's txid snapshot, the Iceberg snapshot)
    in_flight: int = 0  # keys changed after the Iceberg snapshot, before the point: not compared
    note: str | None = None  # not compared, and why (a table dropped: ended in the set, or not yet)


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
                       r.point, r.in_flight, r.note)
            for r in results]


def report(results: Iterable[TableDrift]) -> list[str]:
    """One line per table, then one per differing key."""
    lines = []
    for r in results:
        if r.note is not None:
            lines.append(f"{r.table}: {r.note}")
            continue
        at = f" at {r.point}" if r.point else ""
        flight = f", {r.in_flight} key(s) in flight not compared" if r.in_flight else ""
        lines.append(f"{r.table}{at}: {r.rows} rows, {r.buckets} buckets, {r.differing_buckets} differing, "
                     f"{len(r.keys)} differing key(s){flight}")
        lines += [f"  differs: {r.table} key {list(k)}" for k in r.keys]
    return lines
