"""Control events in a set's queue: where the set's layout changes inside the stream.

Two kinds, both PgQ events of the set's queue (not data; they produce no message):

``S`` schema change
    Written by the capture extension's event trigger in the transaction of an
    ALTER TABLE / DROP TABLE of a captured table (sql/capture,
    ``pgshovel2.recapture``): ev_data the table's new captured layout (see
    :mod:`pgshovel2.relay.schema_change`), ev_extra1 the table tag, ev_extra2 the
    statement (JSON string). The relay registers the table's new schemas and stores
    the result as the set's next version in ZooKeeper, with a ``change`` field
    ``{"kind": "ddl", "table", "statement", "txid", "tick"}``.
``V`` set version
    Written by ``pgshovel set upgrade`` (:func:`pgshovel2.capture.trigger.mark_version`)
    in the transaction that replaces the triggers: ev_data ``{"version": N}``; the record
    of version N is in the set's ZooKeeper history before the event is visible.

Both switch the relay's routes exactly at the event: events before it were captured
in the old layout, events after it in the new one.
"""

import logging
from typing import Any

from pgshovel2 import failpoints
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig
from pgshovel2.errors import SchemaChangeError, SchemaRejectedError
from pgshovel2.relay import schema_change, setup
from pgshovel2.relay.emitter import TableRoute
from pgshovel2.relay.pgq_source import Event
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)

SCHEMA_CHANGE, SET_VERSION = "S", "V"
CONTROL_OPS = frozenset({SCHEMA_CHANGE, SET_VERSION})


class Control:
    """Turns a set's control events into set versions (ZooKeeper) and routes (registry).

    record: the set record in effect before the event (``version``, ``tables``, ``config``).
    """

    def __init__(self, store: ClusterStore, set_name: str, registry: SchemaRegistry | None):
        self.store, self.set_name, self.registry = store, set_name, registry

    def set_version(self, record: dict[str, Any], ev: Event) -> dict[str, Any] | None:
        """The record of the version a ``V`` event switches to; None when it is not newer
        than record (already in effect, e.g. replayed after a restart)."""
        version = int(ev.row["version"])
        if version <= record["version"]:
            log.info("set version marker %d at or below the version in effect (%d): ignored",
                     version, record["version"])
            return None
        return self.store.get_version(self.set_name, version)

    def schema_change(self, record: dict[str, Any], ev: Event, tick: int
                      ) -> tuple[dict[str, Any], TableRoute] | None:
        """(new set record, the changed table's new route) for an ``S`` event at batch tick
        (its cur_tick_id); None when the event does not change a captured table of record.

        Registers the new schemas first (value subject set to BACKWARD compatibility),
        then stores the record as the set's next version, or reuses the stored version
        that already records this change (same table, txid and tick: a replay after a
        restart). Raises SchemaChangeError for an incompatible change or a schema the
        registry refuses.
        """
        statement = str(ev.before or "")
        tables = [Table.from_dict(t) for t in record["tables"]]
        current = next((t for t in tables if t.qualified == ev.table), None)
        if current is None:
            return None
        table = schema_change.new_table(self.set_name, current, ev.row, statement)
        if table is None:
            log.info("DDL on %s leaves its captured columns as they are: %s", ev.table, statement.strip())
            return None
        route = self._route(record, table, statement)
        change = {"kind": "ddl", "table": ev.table, "statement": statement, "txid": ev.txid, "tick": tick}
        tables = [table if t.qualified == ev.table else t for t in tables]
        new = self._stored(record, change) or self._store(record, tables, change)
        log.info("DDL on %s at tick %d (txid %d): set %r now at version %d: %s", ev.table, tick,
                 ev.txid, self.set_name, new["version"], statement.strip())
        return new, route

    def _route(self, record: dict[str, Any], table: Table, statement: str) -> TableRoute:
        config = SetConfig.from_dict(record["config"])
        try:
            if self.registry is not None and config.encoding == "avro":
                self.registry.require_backward(f"{setup.table_topic(self.set_name, config, table)}-value")
            return setup.table_route(self.set_name, config, table, self.registry)
        except SchemaRejectedError as exc:
            raise SchemaChangeError(schema_change.stop_message(
                self.set_name, table.qualified, statement, f"the schema registry refused the new schema: {exc}"),
            ) from exc

    def _stored(self, record: dict[str, Any], change: dict[str, Any]) -> dict[str, Any] | None:
        """The stored version after record's that records change, if any (newest first)."""
        for version in reversed(self.store.history(self.set_name)):
            if version <= record["version"]:
                return None
            stored = self.store.get_version(self.set_name, version)
            if _same_change(stored.get("change"), change):
                return stored
        return None

    def _store(self, record: dict[str, Any], tables: list[Table], change: dict[str, Any]) -> dict[str, Any]:
        latest, znode_version = self.store.get_set(self.set_name)
        if latest["version"] != record["version"]:
            log.warning("set %r is at version %d in ZooKeeper but the stream is at version %d: the DDL "
                        "version is built on the stream's", self.set_name, latest["version"], record["version"])
        new = {**record, "version": latest["version"] + 1, "tables": [t.to_dict() for t in tables],
               "change": change}
        self.store.update_set(self.set_name, new, znode_version)
        failpoints.hit("after_set_version")  # stored, nothing of it in Kafka yet: a restart must reuse it
        return new


def _same_change(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    keys = ("kind", "table", "txid", "tick")
    return a is not None and all(a.get(k) == b[k] for k in keys)

