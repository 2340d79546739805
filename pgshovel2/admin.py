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

from pgshovel2 import __version__, catalog, twophase
from pgshovel2.capture import logical, trigger
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig, load_config, validate_set_name
from pgshovel2.errors import ClusterError
from pgshovel2.twophase import Intent

log = logging.getLogger(__name__)


def create_set(store: ClusterStore, name: str, config_path: str) -> dict[str, Any]:
    """Create set name from a YAML config file; returns the stored set record.

    Raises ConfigError (bad config, unknown table/column, unkeyed table),
    ClusterError (not initialized, set exists, ZooKeeper refuses) or
    CaptureError (database unreachable or refuses); on any error neither
    ZooKeeper nor the database is changed.
    """
    validate_set_name(name)
    config = load_config(config_path)
    store.require_initialized()
    if store.exists(name):
        raise ClusterError(f"replication set {name!r} already exists in cluster {store.cluster!r}")
    intent = Intent.new(store.cluster, name, "create", 1)
    what = f"create set {name!r}"
    with twophase.prepared_command(store, intent, config.dsn, what) as (conn, cur):
        tables = catalog.resolve_set(conn, name, config, config_path)
        record = _record(store.cluster, name, config, tables)
        record["change"] = {"kind": "create", "gid": intent.gid}
        if config.backend == "logical":
            logical.check_tables(cur, config, tables, config_path)
            logical.install(cur, record["slot"])
        else:
            counts = trigger.column_counts(cur, tables)
            trigger.install(cur, record["queue"], record["trigger"], tables, counts,
                            before_images=config.envelope == "debezium")
    twophase.finish(store, intent, config.dsn, lambda: store.create_set(name, record), what)
    return record


def _record(cluster: str, name: str, config: SetConfig, tables: tuple[Table, ...]) -> dict[str, Any]:
    """The set record: the trigger backend's queue, trigger and consumer names, or the
    logical backend's replication slot name (``slot``; queue/trigger/consumer None)."""
    record = {
        "name": name, "version": 1, "cluster": cluster,
        "config": config.to_dict(), "tables": [t.to_dict() for t in tables],
        "queue": None, "trigger": None, "consumer": None,
        "created_at": time.time(), "pgshovel_version": __version__,
    }
    if config.backend == "logical":
        record["slot"] = logical.slot_name(cluster, name)
    else:
        record.update(queue=trigger.queue_name(cluster, name), trigger=trigger.trigger_name(cluster, name),
                      consumer=trigger.CONSUMER)
    return record


def drop_set(store: ClusterStore, name: str) -> list[str]:
    """Remove a set's triggers, consumer and queue, and its znodes, in one two-phase commit.

    Returns what was removed. Raises ClusterError (no such set, changed
    meanwhile) or CaptureError (database unreachable or refuses); on error
    nothing is removed.
    """
    record, version = store.get_set(name)
    config = SetConfig.from_dict(record["config"])
    tables = tuple(Table.from_dict(t) for t in record["tables"])
    intent = Intent.new(store.cluster, name, "drop", record["version"])
    what = f"drop set {name!r}"
    with twophase.prepared_command(store, intent, config.dsn, what) as (_conn, cur):
        if config.backend == "logical":
            logical.check_droppable(cur, record["slot"])
            done = []
        else:
            done = trigger.uninstall(cur, record["queue"], record["trigger"], tables)
    twophase.finish(store, intent, config.dsn, lambda: store.delete_set(name, version), what)
    done.append(f"znode {store.set_path(name)}")
    if config.backend == "logical" and logical.drop_slot(config.dsn, record["slot"]):
        done.append(f"replication slot {record['slot']}")
    return done


def inspect_set(store: ClusterStore, name: str, version: int | None = None) -> dict[str, Any]:
    """The set record (the current one, or version from its history) plus its znode
    version and relay snapshot record. Raises ClusterError for no such set/version."""
    record, znode_version = store.get_set(name)
    if version is not None:
        record = store.get_version(name, version)
    return {**record, "znode_version": znode_version,
            "snapshot": store.get_relay_record(name, "snapshot")}


def history_lines(store: ClusterStore, name: str) -> list[str]:
    """One line per stored version of the set: version, when, what changed, tables."""
    lines = []
    for version in store.history(name):
        record = store.get_version(name, version)
        change = record.get("change", {})
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.get("upgraded_at", record["created_at"])))
        what = change.get("kind", "create")
        if change.get("statement"):
            what += f" ({change['statement']})"
        tables = ", ".join(f"{t['schema']}.{t['name']}({len(t['columns'])})" for t in record["tables"])
        lines.append(f"version {version}  {when} UTC  {what}  tables: {tables}")
    return lines
