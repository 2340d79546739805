"""``pgshovel set snapshot``: request, pause, resume, cancel and show a set's online snapshot.

The request is a versioned znode of the set (:mod:`pgshovel2.relay.snapshot.request`); the set's
active relay carries it out (:mod:`pgshovel2.relay.snapshot.online`) and records its progress in
its committed position and, for ``set status``, in its ``online_snapshot`` relay record.
"""

import time

import psycopg2

from pgshovel2 import tablenames
from pgshovel2.backends import chunks
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.db import connect
from pgshovel2.errors import RequestError
from pgshovel2.relay import ACTIVE, CANCELLED, DONE, FAILED, PAUSED, SnapshotRequest, online_request
from pgshovel2.setrecord import SetRecord


def _table(record: SetRecord, name: str) -> Table:
    """The set's table that name names (pgshovel2.tablenames: ``schema.table``, the quoted tag, or a
    name unique in the set). Raises RequestError naming the set and its tables, or the candidates."""
    try:
        schema, table = tablenames.find(name, [(t.schema, t.name) for t in record.tables], record.name)
    except tablenames.TableNameError as exc:
        raise RequestError(f"--table {name}: {exc}") from exc
    return next(t for t in record.tables if (t.schema, t.name) == (schema, table))


def validate(record: SetRecord, tables: list[Table], where: str | None) -> dict[str, int]:
    """Check each table on the set's database (key, where: chunks.check_table); returns the row
    estimates (tag -> pg_class.reltuples). Raises RequestError naming the table."""
    conn = connect(record.dsn, f"set {record.name!r}", RequestError)
    estimates = {}
    try:
        with conn.cursor() as cur:
            for table in tables:
                try:
                    chunks.check_table(cur, table, where)
                except ValueError as exc:
                    raise RequestError(f"set {record.name!r}: {exc}") from exc
                estimates[table.qualified] = chunks.estimate_rows(cur, table)
                conn.rollback()
    except psycopg2.Error as exc:
        raise RequestError(f"set {record.name!r}: cannot check the tables: {str(exc).strip()}") from exc
    finally:
        conn.close()
    return estimates


def request(store: ClusterStore, name: str, table_names: list[str], where: str | None,
            chunk_size: int) -> SnapshotRequest:
    """Write a new active request for table_names (all of the set's when empty), replacing any
    previous one. Raises ClusterError (no such set), RequestError (a table, the key, where or the
    chunk size is wrong: nothing is written)."""
    record, _ = store.get_set(name)
    tables = [_table(record, n) for n in table_names] if table_names else list(record.tables)
    try:
        new = SnapshotRequest.new([t.qualified for t in tables], where, chunk_size)
    except ValueError as exc:
        raise RequestError(str(exc)) from exc
    validate(record, tables, where)
    _, version = store.get_snapshot_request(name)
    store.put_snapshot_request(name, new.to_dict(), version)
    return new


def change_state(store: ClusterStore, name: str, state: str) -> SnapshotRequest:
    """Pause (PAUSED), resume (ACTIVE) or cancel (CANCELLED) the set's request. Raises RequestError
    when there is none or it is done or cancelled, ConflictError when it changed meanwhile."""
    store.get_set(name)
    data, version = store.get_snapshot_request(name)
    if data is None:
        raise RequestError(f"set {name!r} has no online snapshot request")
    current = SnapshotRequest.from_dict(data)
    if current.state in (DONE, CANCELLED, FAILED):
        raise RequestError(f"the online snapshot {current.id} of set {name!r} is {current.state} already")
    new = current.with_state(state)
    store.put_snapshot_request(name, new.to_dict(), version)
    return new


def show(store: ClusterStore, name: str) -> dict | None:
    """The request with the relay's progress record: {request..., progress: {table, rows, chunks,
    rate, estimate, eta_seconds, ...}}, None when the set has no request."""
    store.get_set(name)
    data, _ = store.get_snapshot_request(name)
    if data is None:
        return None
    progress = store.get_relay_record(name, "online_snapshot") or {}
    if progress.get("id") != data.get("id"):
        progress = {}
    if progress:
        rate, left = progress.get("rate") or 0, (progress.get("estimate") or 0) - progress.get("rows", 0)
        progress["eta_seconds"] = round(left / rate, 1) if rate > 0 and left > 0 else None
        progress["age_seconds"] = round(time.time() - progress.get("updated", time.time()), 1)
    return {**data, "progress": progress}


def lines(info: dict | None) -> list[str]:
    """``set snapshot --status`` / ``set status`` lines for show()'s result."""
    if info is None:
        return ["online snapshot: none requested"]
    failed = f" ({info['error']})" if info.get("error") else ""
    out = [f"online snapshot {info['id']}: {info['state']}{failed}, tables {', '.join(info['tables'])}, "
           f"chunks of {info['chunk_size']} rows" + (f", where {info['where']}" if info.get("where") else "")]
    p = info.get("progress") or {}
    if p:
        eta = f", ETA {p['eta_seconds']:.0f}s" if p.get("eta_seconds") is not None else ""
        est = f" of ~{p['estimate']}" if p.get("estimate") else ""
        out.append(f"  {p.get('table')}: {p.get('rows', 0)}{est} rows in {p.get('chunks', 0)} chunks "
                   f"({p.get('rate', 0):.0f} rows/s{eta}), {p.get('dropped', 0)} left out as changed meanwhile")
    return out


STATES = {"pause": PAUSED, "resume": ACTIVE, "cancel": CANCELLED}


def after_upgrade(store: ClusterStore, name: str, added: list[str]) -> tuple[SnapshotRequest | None, list[str]]:
    """Request an online snapshot of the tables an upgrade added (tags), with those of a request still
    running or paused (its own progress restarts: a table read twice is still exact). Returns (the
    request or None, notes for the operator: keyless tables left out)."""
    record, _ = store.get_set(name)
    keyed = [t for t in record.tables if t.qualified in added and t.key]
    notes = [f"table {t.qualified} has no key: not snapshotted online (bootstrap consumers from the table)"
             for t in record.tables if t.qualified in added and not t.key]
    data, _ = store.get_snapshot_request(name)
    running = SnapshotRequest.from_dict(data) if data is not None else None
    wanted = [t.qualified for t in keyed]
    if running is not None and running.state in (ACTIVE, PAUSED):
        wanted = [t for t in running.tables if record.table(t) is not None and t not in wanted] + wanted
        notes.append(f"online snapshot {running.id} was {running.state}: replaced by one with its tables too")
    if not wanted:
        return None, notes
    size = running.chunk_size if running is not None else online_request.DEFAULT_CHUNK_SIZE
    return request(store, name, wanted, None, size), notes
