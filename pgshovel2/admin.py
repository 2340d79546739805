"""Administrative operations on replication sets (create, drop, inspect).

Order of work, so a failure changes nothing: validate the config and resolve
it against the live catalog (reads only); install the capture in one database
transaction; create the znodes; commit the database transaction. If ZooKeeper
refuses, the database transaction is rolled back; if the commit fails, the
znodes are removed again.
"""

import logging
import time
from typing import Any

import psycopg2

from pgshovel2 import __version__, catalog
from pgshovel2.capture import trigger
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig, load_config, validate_set_name
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ClusterError

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
    conn = connect(config.dsn, f"set {name!r}")
    try:
        tables = catalog.resolve_set(conn, name, config, config_path)
        record = _record(store.cluster, name, config, tables)
        with conn.cursor() as cur:
            counts = trigger.column_counts(cur, tables)
            try:
                trigger.install(cur, record["queue"], record["trigger"], tables, counts,
                                before_images=config.envelope == "debezium")
            except psycopg2.Error as exc:
                raise CaptureError(f"installing capture for set {name!r} failed: "
                                   f"{str(exc).strip()}") from exc
        store.create_set(name, record)
        try:
            conn.commit()
        except psycopg2.Error as exc:
            store.delete_set(name, 0)
            raise CaptureError(f"commit of set {name!r} failed: {str(exc).strip()}") from exc
        return record
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def _record(cluster: str, name: str, config: SetConfig, tables: tuple[Table, ...]) -> dict[str, Any]:
    return {
        "name": name, "version": 1, "cluster": cluster,
        "config": config.to_dict(), "tables": [t.to_dict() for t in tables],
        "queue": trigger.queue_name(cluster, name), "trigger": trigger.trigger_name(cluster, name),
        "consumer": trigger.CONSUMER, "created_at": time.time(), "pgshovel_version": __version__,
    }


def drop_set(store: ClusterStore, name: str) -> list[str]:
    """Remove a set's triggers, consumer and queue, then its znodes; returns what was removed.

    Raises ClusterError (no such set) or CaptureError (database unreachable);
    the znodes stay until the database part succeeded, so a drop can be retried.
    """
    record, version = store.get_set(name)
    config = SetConfig.from_dict(record["config"])
    tables = tuple(Table.from_dict(t) for t in record["tables"])
    conn = connect(config.dsn, f"set {name!r}")
    try:
        with conn.cursor() as cur:
            done = trigger.uninstall(cur, record["queue"], record["trigger"], tables)
        conn.commit()
    except psycopg2.Error as exc:
        conn.rollback()
        raise CaptureError(f"dropping capture of set {name!r} failed: {str(exc).strip()}") from exc
    finally:
        conn.close()
    store.delete_set(name, version)
    return done + [f"znode {store.set_path(name)}"]


def inspect_set(store: ClusterStore, name: str) -> dict[str, Any]:
    """The set record plus its znode version and relay snapshot record."""
    record, version = store.get_set(name)
    return {**record, "znode_version": version,
            "snapshot": store.get_relay_record(name, "snapshot")}

