"""Control events in a set's queue: where the set's layout changes inside the stream.

Two kinds, both PgQ events of the set's queue (not data; they produce no message):

``S`` schema change
    Written by the capture extension's event trigger in the transaction of an
    ALTER TABLE / DROP TABLE of a captured table (sql/capture,
    ``pgshovel2.recapture``): ev_data the table's new captured layout (see
    :mod:`pgshovel2.relay.schema_change`), ev_extra1 the table tag, ev_extra2 the
    statement (JSON string). The relay registers the table's new schemas and stores
    the result as the set's next version in ZooKeeper, with a ``change`` field
    ``{"kind": "ddl", "table", "statement", "txid", "tick"}`` (tick: the unit of the event's
    position, the PgQ tick id).
``V`` set version
    Written by ``pgshovel set upgrade`` (:func:`pgshovel2.backends.trigger.mark_version`)
    in the transaction that replaces the triggers: ev_data ``{"version": N}``; the record
    of version N is in the set's ZooKeeper history before the event is visible.

Both switch the relay's routes exactly at the event: events before it were captured
in the old layout, events after it in the new one.
"""

import logging
import time

from pgshovel2 import failpoints
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import ClusterError, SchemaChangeError, SchemaRejectedError, UnavailableError
from pgshovel2.relay import schema_change, setup
from pgshovel2.relay.emitter import TableRoute
from pgshovel2.relay.source import SET_VERSION, Control
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)


class ControlEvents:
    """Turns a set's control events into set versions (ZooKeeper) and routes (registry)."""

    def __init__(self, store: ClusterStore, set_name: str, registry: SchemaRegistry | None):
        self.store, self.set_name, self.registry = store, set_name, registry

    def apply(self, record: SetRecord, ev: Control) -> tuple[SetRecord, TableRoute | None] | None:
        """(new record, the changed table's route or None for all routes) that the event
        switches to from record (the one in effect before it); None when it changes nothing.

        Raises SchemaChangeError for a DDL that cannot be relayed compatibly.
        """
        if ev.op == SET_VERSION:
            new = self.set_version(record, ev)
            return None if new is None else (new, None)
        return self.schema_change(record, ev)

    def set_version(self, record: SetRecord, ev: Control) -> SetRecord | None:
        """The record of the version a ``V`` event switches to; None when it is not newer
        than record (already in effect, e.g. replayed after a restart)."""
        version = int(ev.row["version"])
        if version <= record.version:
            log.info("set version marker %d at or below the version in effect (%d): ignored",
                     version, record.version)
            return None
        return self._wait_version(version)

    def _wait_version(self, version: int, timeout: float = 10.0) -> SetRecord:
        """The record of version; a marker committed before its ZooKeeper step (a server without
        prepared transactions, :mod:`pgshovel2.ops.twophase`) is waited for, then raises
        UnavailableError (the relay retries from its committed position)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.store.get_version(self.set_name, version)
            except ClusterError as exc:
                if time.monotonic() >= deadline:
                    raise UnavailableError(f"set {self.set_name!r}: the stream is at the marker of version {version}, "
                                           "which ZooKeeper does not have yet (an upgrade still finishing, or "
                                           "interrupted: run 'pgshovel cluster recover'); waiting") from exc
                time.sleep(0.2)

    def schema_change(self, record: SetRecord, ev: Control) -> tuple[SetRecord, TableRoute] | None:
        """(new set record, the changed table's new route) for an ``S`` event; None when the
        event does not change a captured table of record.

        Registers the new schemas first (value subject set to BACKWARD compatibility),
        then stores the record as the set's next version, or reuses the stored version
        that already records this change (same table, txid and unit: a replay after a
        restart). Raises SchemaChangeError for an incompatible change or a schema the
        registry refuses.
        """
        statement = str(ev.before or "")
        current = record.table(ev.table)
        if current is None:
            return None
        table = schema_change.new_table(self.set_name, current, ev.row, statement)
        if table is None:
            log.info("DDL on %s leaves its captured columns as they are: %s", ev.table, statement.strip())
            return None
        new_record = record.replace(tables=tuple(table if t.qualified == ev.table else t for t in record.tables))
        route = self._route(new_record, table, statement)
        change = {"kind": "ddl", "table": ev.table, "statement": statement, "txid": ev.txid, "tick": ev.unit}
        new = self._stored(record, change) or self._store(record, new_record, change)
        log.info("DDL on %s at unit %d (txid %d): set %r now at version %d: %s", ev.table, ev.unit,
                 ev.txid, self.set_name, new.version, statement.strip())
        return new, route

    def _route(self, record: SetRecord, table: Table, statement: str) -> TableRoute:
        try:
            if self.registry is not None and record.config.encoding == "avro":
                self.registry.require_backward(f"{record.topic(table)}-value")
            return setup.table_route(record, table, self.registry)
        except SchemaRejectedError as exc:
            raise SchemaChangeError(schema_change.stop_message(
                self.set_name, table.qualified, statement, f"the schema registry refused the new schema: {exc}"),
            ) from exc

    def _stored(self, record: SetRecord, change: dict) -> SetRecord | None:
        """The stored version after record's that records change, if any (newest first)."""
        for version in reversed(self.store.history(self.set_name)):
            if version <= record.version:
                return None
            stored = self.store.get_version(self.set_name, version)
            if _same_change(stored.change, change):
                return stored
        return None

    def _store(self, record: SetRecord, new_record: SetRecord, change: dict) -> SetRecord:
        latest, znode_version = self.store.get_set(self.set_name)
        if latest.version != record.version:
            log.warning("set %r is at version %d in ZooKeeper but the stream is at version %d: the DDL "
                        "version is built on the stream's", self.set_name, latest.version, record.version)
        new = new_record.replace(version=latest.version + 1, change=change)
        self.store.update_set(new, znode_version)
        failpoints.hit("after_set_version")  # stored, nothing of it in Kafka yet: a restart must reuse it
        return new


def _same_change(a: dict | None, b: dict) -> bool:
    keys = ("kind", "table", "txid", "tick")
    return a is not None and all(a.get(k) == b[k] for k in keys)
