"""Administrative operations on replication sets (create, drop, inspect).

Each command is one two-phase commit (:mod:`pgshovel2.twophase`): validate
the config and resolve it against the live catalog, do the database work in
a transaction and PREPARE it, apply the ZooKeeper change as one multi-op,
COMMIT PREPARED. If ZooKeeper refuses, the prepared transaction is rolled
back; if the command dies half-way, ``pgshovel cluster recover`` finishes or
undoes it. Upgrades are in :mod:`pgshovel2.upgrade`.
"""

import dataclasses
import logging
import time
from typing import Any

from pgshovel2 import catalog, redact
from pgshovel2.backends import logical, partition_checks, partitions, pgoutput, privileges, trigger
from pgshovel2.backends.grants import grants_sql
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig, load_config, validate_set_name
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ClusterError
from pgshovel2.ops import setdiff, twophase
from pgshovel2.ops.twophase import Intent
from pgshovel2.setrecord import PLUGIN, SetRecord, SlotCapture

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
        plugin = _decoder(cur, config, change)
        tables = _resolve(conn, cur, name, config, config_path, plugin, change)
        _check_privileges(cur, config, config_path, plugin)
        record = _with_capture(cur, SetRecord.new(store.cluster, name, config, tables, change, plugin))
        store.check_prefix(record)
        check_partitions(cur, record, config_path)
        record = _install(cur, record, config_path)
        twophase.plan(store, intent, {"op": "create", "record": record.to_dict()})
    twophase.finish(store, intent, config.dsn, lambda: store.create_set(record), what)
    return record


def _decoder(cur, config: SetConfig, change: dict[str, Any]) -> str:
    """A logical set's output plugin (logical.choose_decoder); its reason goes into change, and what
    the server's slot limits mean for the set into change["notes"] (logical.slot_limit_notes)."""
    if config.backend != "logical":
        return PLUGIN
    plugin, why = logical.choose_decoder(cur, config.decoder)
    change["decoder"] = f"{plugin} ({why})"
    if limits := logical.slot_limit_notes(cur):
        change.setdefault("notes", []).extend(limits)
    return plugin


def _resolve(conn, cur, name: str, config: SetConfig, config_path: str, plugin: str,
             change: dict[str, Any]) -> tuple[catalog.Table, ...]:
    """The config's tables resolved against the catalog (catalog.resolve_set), without the generated
    columns the set's path cannot carry, and for a logical set with the columns an UPDATE may
    leave unlogged made nullable (logical.unlogged_nullable); what that changed goes into
    change["notes"]."""
    notes: list[str] = []
    stored = not (config.backend == "logical" and plugin == pgoutput.NAME and not pgoutput.sends_generated(cur))
    tables = catalog.resolve_set(conn, name, config, config_path, stored_generated=stored, notes=notes)
    if config.backend == "logical":
        tables = logical.unlogged_nullable(cur, tables, notes, config.envelope == "debezium")
    if notes:
        change.setdefault("notes", []).extend(notes)
    return tables


def _with_capture(cur, record: SetRecord) -> SetRecord:
    """A trigger set's record with its capture kind chosen (and why); others as they are."""
    if isinstance(record.capture, SlotCapture):
        return record
    kind, why = trigger.choose_capture(cur, record.config.capture, record.config.pgq)
    return record.replace(capture=dataclasses.replace(record.capture, kind=kind, why=why))


def grants(config_path: str, transfer_ownership: bool = False) -> str:
    """The SQL granting the set's admin and relay roles what they need (pgshovel2.backends.grants;
    transfer_ownership: ALTER TABLE ... OWNER TO where a path needs an owner). Raises ConfigError for
    a bad config; reads nothing else."""
    return grants_sql(load_config(config_path), transfer_ownership)


def _check_privileges(cur, config: SetConfig, config_path: str, plugin: str) -> None:
    """Raise CaptureError naming every privilege the set lacks (nothing changed yet); plugin: a
    logical set's output plugin."""
    problems = privileges.missing(cur, config, plugin if config.backend == "logical" else None)
    if problems:
        raise CaptureError(f"{config_path}: {len(problems)} missing privilege(s) in the set's database (see "
                           "'pgshovel set create --print-grants CONFIG'):\n  " + "\n  ".join(problems))


def check_partitions(cur, record: SetRecord, config_path: str) -> None:
    """Raise ConfigError for tables of the set that overlap each other or another set's through
    partitions (pgshovel2.backends.partition_checks)."""
    partition_checks.check(cur, record.tables, partitions.base_name(record), partitions.publication(record),
                           config_path)


def _install(cur, record: SetRecord, config_path: str) -> SetRecord:
    """The backend's capture objects of a new set, in the command's transaction; returns the
    record with what install chose (the kind of PgQ)."""
    if isinstance(record.capture, SlotCapture):
        logical.check_tables(cur, record.config, record.tables, config_path, record.capture.plugin)
        logical.install(cur, record.capture.slot, record.capture.plugin, record.tables,
                        existing=record.config.publication)
        partitions.install_logical(cur, record, record.tables)
        return record
    counts = trigger.column_counts(cur, record.tables)
    kind = trigger.install(cur, record.capture, record.tables, counts,
                           before_images=record.config.envelope == "debezium", pgq=record.config.pgq)
    return record.replace(capture=dataclasses.replace(record.capture, pgq=kind))


def _preview(store: ClusterStore, name: str, config: SetConfig, config_path: str) -> SetRecord:
    """The record create would store, checked as create checks it, in a read-only transaction."""
    conn = connect(config.dsn, f"set {name!r}")
    try:
        conn.set_session(readonly=True)
        change: dict[str, Any] = {"kind": "create"}
        with conn.cursor() as cur:
            plugin = _decoder(cur, config, change)
            tables = _resolve(conn, cur, name, config, config_path, plugin, change)
            record = _with_capture(cur, SetRecord.new(store.cluster, name, config, tables, change, plugin))
            check_partitions(cur, record, config_path)
        store.check_prefix(record)
        if isinstance(record.capture, SlotCapture):
            with conn.cursor() as cur:
                logical.check_server(cur, plugin)
                logical.check_tables(cur, config, tables, config_path, plugin)
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
        if isinstance(record.capture, SlotCapture):
            logical.check_droppable(cur, record.capture.slot)
            done = partitions.uninstall(cur, partitions.for_record(record), record.tables, everywhere=True)
            if record.owns_publication and logical.drop_publication(cur, record.capture.slot):
                done.append(f"publication {record.capture.slot}")
        else:
            done = trigger.uninstall(cur, record.capture, record.tables)
        twophase.plan(store, intent, {"op": "delete", "name": name, "version": version, "prefix": record.prefix})
    twophase.finish(store, intent, record.dsn, lambda: store.delete_set(name, version, record.prefix), what)
    done.append(f"znode {store.set_path(name)}")
    if isinstance(record.capture, SlotCapture) and logical.drop_slot(record.dsn, record.capture.slot):
        done.append(f"replication slot {record.capture.slot}")
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
