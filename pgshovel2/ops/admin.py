"""Administrative operations on replication sets (create, drop, inspect).

Each command is one two-phase commit (:mod:`pgshovel2.twophase`): validate
the config and resolve it against the live catalog, do the database work in
a transaction and PREPARE it, apply the ZooKeeper change as one multi-op,
COMMIT PREPARED. If ZooKeeper refuses, the prepared transaction is rolled
back; if the command dies half-way, ``pgshovel cluster recover`` finishes or
undoes it. Upgrades are in :mod:`pgshovel2.upgrade`.
"""

import logging
import time
from typing import Any

from pgshovel2 import catalog, redact
from pgshovel2.backends import lifecycle, partition_checks, partitions, privileges
from pgshovel2.backends.grants import grants_sql
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig, load_config, validate_set_name
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ClusterError
from pgshovel2.ops import setdiff, twophase
from pgshovel2.ops.twophase import Intent
from pgshovel2.setrecord import PLUGIN, SetRecord

log = logging.getLogger(__name__)


@twophase.retry_on_deadlock
def create_set(store: ClusterStore, name: str, config_path: str, dry_run: bool = False) -> SetRecord:
    """Create set name from a YAML config file; returns the stored set record (dry_run: the
    record it would store, nothing written, only read).

    Raises ConfigError (bad config or name, unknown table/column, unkeyed table, every
    replica-identity problem at once), ClusterError (not initialized, set exists, topic
    prefix taken, ZooKeeper refuses) or CaptureError (database unreachable or refuses); on
    any error neither ZooKeeper nor the database is changed.
    """
    validate_set_name(name)
    config = load_config(config_path)
    store.require_initialized()
    if store.exists(name):
        raise ClusterError(f"replication set {name!r} already exists in cluster {store.cluster!r}")
    if dry_run:
        return _preview(store, name, config, config_path)
    intent = Intent.new(store.cluster, name, "create", 1)
    what = f"create set {name!r}"
    with twophase.prepared_command(store, intent, config.dsn, what) as (conn, cur):
        change: dict[str, Any] = {"kind": "create", "gid": intent.gid}
        plugin = lifecycle.decoder(cur, config, change)
        tables = _resolve(conn, name, config, config_path, plugin, change)
        _check_privileges(cur, config, config_path, plugin)
        record = SetRecord.new(store.cluster, name, config, tables, change, plugin or PLUGIN)
        record = lifecycle.with_capture(cur, record)
        store.check_prefix(record)
        check_partitions(cur, record, config_path)
        record = lifecycle.install(cur, record, config_path)
        twophase.plan(store, intent, {"op": "create", "record": record.to_dict()})
    twophase.finish(store, intent, config.dsn, lambda: store.create_set(record), what)
    return record


def _resolve(conn, name: str, config: SetConfig, config_path: str, plugin: str | None,
             change: dict[str, Any]) -> tuple[catalog.Table, ...]:
    """The config's tables as the set's path carries them (backends.lifecycle.resolve_tables); what that
    changed goes into change["notes"]."""
    notes: list[str] = []
    tables = lifecycle.resolve_tables(conn, name, config, config_path, plugin, notes)
    if notes:
        change.setdefault("notes", []).extend(notes)
    return tables


def grants(config_path: str, transfer_ownership: bool = False) -> str:
    """The SQL granting the set's admin and relay roles what they need (pgshovel2.backends.grants;
    transfer_ownership: ALTER TABLE ... OWNER TO where a path needs an owner). Raises ConfigError for
    a bad config; reads nothing else."""
    return grants_sql(load_config(config_path), transfer_ownership)


def _check_privileges(cur, config: SetConfig, config_path: str, plugin: str | None) -> None:
    """Raise CaptureError naming every privilege the set lacks (nothing changed yet); plugin: a
    logical set's output plugin, None for a trigger set."""
    problems = privileges.missing(cur, config, plugin)
    if problems:
        raise CaptureError(f"{config_path}: {len(problems)} missing privilege(s) in the set's database (see "
                           "'pgshovel set create --print-grants CONFIG'):\n  " + "\n  ".join(problems))


def check_partitions(cur, record: SetRecord, config_path: str) -> None:
    """Raise ConfigError for tables of the set that overlap each other or another set's through
    partitions (pgshovel2.backends.partition_checks)."""
    partition_checks.check(cur, record.tables, partitions.base_name(record), partitions.publication(record),
                           config_path)


def _preview(store: ClusterStore, name: str, config: SetConfig, config_path: str) -> SetRecord:
    """The record create would store, checked as create checks it, in a read-only transaction."""
    conn = connect(config.dsn, f"set {name!r}")
    try:
        conn.set_session(readonly=True)
        change: dict[str, Any] = {"kind": "create"}
        with conn.cursor() as cur:
            plugin = lifecycle.decoder(cur, config, change)
            tables = _resolve(conn, name, config, config_path, plugin, change)
            record = lifecycle.with_capture(cur, SetRecord.new(store.cluster, name, config, tables, change,
                                                          plugin or PLUGIN))
            check_partitions(cur, record, config_path)
        store.check_prefix(record)
        with conn.cursor() as cur:
            lifecycle.check_new(cur, record, config_path)
        return record
    finally:
        conn.rollback()
        conn.close()


@twophase.retry_on_deadlock
def drop_set(store: ClusterStore, name: str) -> list[str]:
    """Remove a set's capture (triggers, consumer and queue; or its slot) and its znodes, in
    one two-phase commit.

    Returns what was removed. Raises ClusterError (no such set, changed meanwhile; a deadlock
    with pgqd's ticker or a writer is tried again first) or CaptureError (database unreachable
    or refuses, slot in use); on error nothing is removed.
    """
    record, version = store.get_set(name)
    intent = Intent.new(store.cluster, name, "drop", record.version)
    what = f"drop set {name!r}"
    with twophase.prepared_command(store, intent, record.dsn, what) as (_conn, cur):
        done = lifecycle.uninstall(cur, record)
        twophase.plan(store, intent, {"op": "delete", "name": name, "version": version, "prefix": record.prefix})
    twophase.finish(store, intent, record.dsn, lambda: store.delete_set(name, version, record.prefix), what)
    done.append(f"znode {store.set_path(name)}")
    done += lifecycle.release(record)
    return done


def inspect_set(store: ClusterStore, name: str, version: int | None = None) -> dict[str, Any]:
    """The set record (the current one, or version from its history) as stored, plus its znode
    version, topics and relay snapshot record. Raises ClusterError for no such set/version."""
    record, znode_version = store.get_set(name)
    if version is not None:
        record = store.get_version(name, version)
    topics = record.topics
    data = record.to_dict()
    data["config"]["dsn"] = redact.dsn(record.dsn)  # a record older than cluster secure may hold a password
    return {**redact.deep(data), "znode_version": znode_version,
            "topics": {"tables": topics.tables, "transactions": topics.transactions, "positions": topics.positions,
                       "dead_letter": topics.dead_letter if record.config.oversized.policy == "dead-letter" else None},
            "snapshot": store.get_relay_record(name, "snapshot")}


def history(store: ClusterStore, name: str) -> list[dict[str, Any]]:
    """The set's stored versions, oldest first, each {version, at (seconds since the epoch), at_from,
    kind, what, changes (setdiff.TableChange.to_dict of each table against the version before; [] for
    the first), tables (schema.table(n columns))}.

    at is the version's own time: the set's created_at for the first, the record's upgraded_at for
    later ones (written with every version); a later record without its own (written before every
    writer set it, or carrying its predecessor's) takes its ``history/<n>`` znode's ctime (at_from
    says which). Raises ClusterError for no such set."""
    out, before, before_at = [], None, None
    for version in store.history(name):
        record, ctime = store.version_written(name, version)
        at, at_from = _version_time(record, before, before_at, ctime)
        changes = [] if before is None else [c.to_dict() for c in setdiff.table_changes(
            before.tables, record.tables, before.topic, record.topic)]
        out.append({"version": version, "at": at, "at_from": at_from, "kind": (record.change or {}).get(
            "kind", "create"), "what": _what(record.change or {}), "changes": changes,
            "tables": [f"{t.schema}.{t.name}({len(t.columns)})" for t in record.tables]})
        before, before_at = record, at
    return out


def _version_time(record: SetRecord, before: SetRecord | None, before_at: float | None,
                  ctime: float) -> tuple[float, str]:
    """(time, where it came from) of a version (see :func:`history`)."""
    if before is None:
        return record.created_at, "created_at"
    if record.upgraded_at is not None and record.upgraded_at != before_at:
        return record.upgraded_at, "upgraded_at"
    return ctime, "znode ctime"


def _what(change: dict[str, Any]) -> str:
    what = change.get("kind", "create")
    if change.get("statement"):
        what += f" ({change['statement']})"
    if accepted := change.get("accepted"):
        why = accepted.get("reason") or "no reason"
        what += f" accepted by {accepted.get('by')} ({accepted.get('mode')}: {why})"
    return what


def history_lines(store: ClusterStore, name: str) -> list[str]:
    """One line per stored version of the set (:func:`history`): version, its own time (UTC; marked
    when it comes from the znode), what made it, what changed per table, tables."""
    lines = []
    for v in history(store, name):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(v["at"])) + " UTC"
        if v["at_from"] == "znode ctime":
            when += " (znode)"
        changed = "; ".join(setdiff.TableChange(**c).describe() for c in v["changes"]) or "-"
        lines.append(f"version {v['version']}  {when}  {v['what']}  changes: {changed}  "
                     f"tables: {', '.join(v['tables'])}")
    return lines
