"""Control events in a set's stream: where the set's layout changes inside it.

``S`` schema change
    Written by the capture extension's event trigger in the transaction of an
    ALTER TABLE / DROP TABLE of a captured table (sql/capture, ``pgshovel2.recapture``),
    by the PL/pgSQL capture at the first write after a layout change, or made by a logical
    source from a new layout in the stream (:mod:`pgshovel2.relay.logical.relation_layout`): row the
    table's new captured layout (see :mod:`pgshovel2.relay.ddl.schema_change`), table the table tag,
    before the statement. The relay registers the table's new schemas and stores the result
    as the set's next version in ZooKeeper, with a ``change`` field ``{"kind": "ddl", "table",
    "statement", "txid", "tick", "ordinal"}`` (tick: the unit of the event's position, the PgQ
    tick id or commit LSN; ``accepted``: the operator's decision, for an incompatible change).
    A dropped table (row ``{"dropped": true}``) ends in the set there: the next version lacks it
    (``change: {"kind": "drop", ...}``) and a ``TABLE_DROPPED`` record marks the place.
``V`` set version
    Written by ``pgshovel set upgrade`` (:func:`pgshovel2.backends.trigger.mark_version`)
    in the transaction that replaces the triggers: ev_data ``{"version": N}``; the record
    of version N is in the set's ZooKeeper history before the event is visible. Logical sets
    also carry the relay's own marker of a dropped table as one (``{"dropped": tag, ...}``:
    :mod:`pgshovel2.relay.ddl.drop_watch`).

Both switch the relay's routes exactly at the event: events before it were captured
in the old layout, events after it in the new one. A change the rules cannot follow raises
SchemaChangeError; the loop then waits for the operator's decision
(:mod:`pgshovel2.relay.ddl.gate`) and calls :meth:`ControlEvents.accept` with it.
"""

import logging
import time
from dataclasses import dataclass, replace

from pgshovel2 import failpoints
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import ClusterError, SchemaChangeError, SchemaRejectedError, UnavailableError
from pgshovel2.relay.ddl import schema_change
from pgshovel2.relay.emit import routes as emit_routes
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.source import SET_VERSION, Control
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)

# Records on the transactions topic that mark a table's layout or topic changing at a DDL (docs/wire.rst)
SCHEMA_CHANGED, TOPIC_CHANGED, TABLE_DROPPED = "SCHEMA_CHANGED", "TOPIC_CHANGED", "TABLE_DROPPED"


@dataclass(frozen=True)
class Switch:
    """What a control event switches to: record, the set version in effect from the event on;
    route, the one table's new route (None: every route rebuilt, or the table dropped); mark,
    a record for the transactions topic at the event (type and table: its topic; new_topic for
    TOPIC_CHANGED) or None; snapshot, a table to snapshot online (into its new topic, or to refresh
    values a DDL rewrote: :func:`rewrites_values`; None: none);
    dropped, the tag of a table that left the set."""

    record: SetRecord
    route: TableRoute | None = None
    mark: dict | None = None
    snapshot: Table | None = None
    dropped: str | None = None


class ControlEvents:
    """Turns a set's control events into set versions (ZooKeeper) and routes (registry)."""

    def __init__(self, store: ClusterStore, set_name: str, registry: SchemaRegistry | None):
        self.store, self.set_name, self.registry = store, set_name, registry

    def apply(self, record: SetRecord, ev: Control) -> Switch | None:
        """What the event switches to from record (the version in effect before it); None when
        it changes nothing.

        Raises SchemaChangeError for a DDL that cannot be relayed compatibly and has no stored
        version yet (the loop asks the operator, then calls :meth:`accept`).
        """
        if ev.op == SET_VERSION:
            marker = ev.row if isinstance(ev.row, dict) and "version" not in ev.row else {}
            if "dropped" in marker:
                return self._dropped(record, ev, str(marker["dropped"]), str(marker.get("statement") or ""))
            if "renamed" in marker:
                return self._renamed(record, ev, str(marker["renamed"]), (marker["schema"], marker["name"]))
            new = self.set_version(record, ev)
            return None if new is None else Switch(new)
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

    def schema_change(self, record: SetRecord, ev: Control) -> Switch | None:
        """The switch of an ``S`` event; None when the event does not change a captured table
        of record.

        Registers the new schemas first (value subject set to BACKWARD compatibility),
        then stores the record as the set's next version, or reuses the stored version
        that already records this change (same table, txid, unit and ordinal: a replay after a
        restart, also of a change an operator accepted). Raises SchemaChangeError for an
        incompatible change or a schema the registry refuses.
        """
        statement = str(ev.before or "")
        current = record.table(ev.table)
        if current is None:
            return None
        if isinstance(ev.row, dict) and ev.row.get("dropped"):
            return self._dropped(record, ev, ev.table, statement)
        change = _change("ddl", ev, statement)
        stored = self._stored(record, change)
        if stored is not None:
            return self._reused(record, stored, ev)
        table = schema_change.new_table(self.set_name, current, ev.row, statement)
        if table is None:
            log.info("DDL on %s leaves its captured columns as they are: %s", ev.table, statement.strip())
            return None
        new_record = _with_table(record, table)
        route = self._route(new_record, table, statement)
        new = self._store(record, new_record, change)
        log.info("DDL on %s at unit %d (txid %d): set %r now at version %d: %s", ev.table, ev.unit,
                 ev.txid, self.set_name, new.version, statement.strip())
        return Switch(new, route, snapshot=table if rewrites_values(current, table) else None)

    def accept(self, record: SetRecord, ev: Control, decision: dict) -> Switch:
        """The switch of an incompatible ``S`` event an operator accepted (decision:
        :mod:`pgshovel2.relay.ddl.gate`, mode ``schema`` or ``new-topic``). Raises
        SchemaChangeError when the decision does not cover the change (a key change accepted
        without a new topic)."""
        statement = str(ev.before or "")
        current = record.table(ev.table)
        mode = decision["mode"]
        new_key = tuple(decision["key"]) if decision.get("key") else None
        table = schema_change.new_table(self.set_name, current, ev.row, statement, mode, new_key)
        change = {**_change("ddl", ev, statement), "accepted": _accepted(decision)}
        return self._accepted(record, table or current, change, statement, mode)

    def new_generation(self, record: SetRecord, tag: str, txid: int, unit: int, ordinal: int, why: str,
                       decision: dict | None) -> Switch | None:
        """The switch to table tag's next topic generation before the change at (unit, ordinal)
        (a key value its kept key layout cannot hold, errors.KeyLayoutError): the stored version
        recording it (a replay), else the decision's (None without one)."""
        change = {"kind": "generation", "table": tag, "statement": why, "txid": txid, "tick": unit,
                  "ordinal": ordinal}
        stored = self._stored(record, change)
        if stored is not None:
            return self._reused(record, stored, None, tag)
        if decision is None:
            return None
        current = record.table(tag)
        table = Table(current.schema, current.name, current.columns, current.key, current.key_source, None,
                      current.generation + 1, current.oid)
        return self._accepted(record, table, {**change, "accepted": _accepted(decision)}, why,
                              schema_change.NEW_TOPIC)

    def _accepted(self, record: SetRecord, table: Table, change: dict, statement: str, mode: str) -> Switch:
        current = record.table(table.qualified)
        new_record = _with_table(record, table)
        if mode == schema_change.NEW_TOPIC:
            new_record = _retire(new_record, record, current, change, "new-topic")
        stored = self._stored(record, change)
        route = self._route(new_record, table, statement, forced=mode == schema_change.SCHEMA)
        new = stored or self._store(record, new_record, change)
        log.warning("DDL on %s accepted by %s (%s) at unit %d: set %r now at version %d", table.qualified,
                    change["accepted"].get("by"), mode, change["tick"], self.set_name, new.version)
        return self._switch(record, new, table.qualified, route)

    def _reused(self, record: SetRecord, stored: SetRecord, ev: Control | None, tag: str | None = None) -> Switch:
        """The switch to a stored version (a replay after a restart)."""
        tag = tag or ev.table
        table = stored.table(tag)
        if table is None:
            return Switch(stored, None, _mark(TABLE_DROPPED, record.topic(record.table(tag))), dropped=tag)
        route = emit_routes.table_route(stored, table, self.registry)
        return self._switch(record, stored, tag, route)

    def _switch(self, record: SetRecord, new: SetRecord, tag: str, route: TableRoute) -> Switch:
        """The switch from record to new of table tag (route: its new route) with its mark."""
        before, after = record.table(tag), new.table(tag)
        if after.generation != before.generation:
            mark = _mark(TOPIC_CHANGED, record.topic(before), new.topic(after))
            return Switch(new, None, mark, snapshot=after)
        accepted = (new.change or {}).get("accepted")
        mark = _mark(SCHEMA_CHANGED, new.topic(after)) if accepted else None
        return Switch(new, route, mark)

    def _dropped(self, record: SetRecord, ev: Control, tag: str, statement: str) -> Switch | None:
        """The switch at a DROP TABLE of tag: the next version without it (stored, or reused on a
        replay); None when tag is not in record (dropped already, or never in the set)."""
        current = record.table(tag)
        if current is None:
            log.info("DROP TABLE marker of %s: not a table of set version %d (ended before): ignored", tag,
                     record.version)
            return None
        change = {**_change("drop", ev, statement), "table": tag}
        new_record = _retire(record.replace(tables=tuple(t for t in record.tables if t.qualified != tag)), record,
                             current, change, "dropped")
        new = self._stored(record, change) or self._store(record, new_record, change)
        log.warning("table %s was dropped (%s): it ends in set %r at unit %d, ordinal %d; set version %d",
                    tag, statement.strip() or "noticed by the relay", self.set_name, ev.unit, ev.ordinal, new.version)
        return Switch(new, None, _mark(TABLE_DROPPED, record.topic(current)), dropped=tag)

    def _renamed(self, record: SetRecord, ev: Control, tag: str, relation: tuple[str, str]) -> Switch | None:
        """The switch at the drop watch's rename marker of tag: the next version records where the
        table is now (Table.renamed; its identity, schemas and topic stay); None when record knows it
        already (the event trigger's S event came first) or has no such table."""
        current = record.table(tag)
        if current is None or current.relation == relation:
            return None
        table = replace(current, renamed=None if relation == (current.schema, current.name) else relation)
        statement = f"ALTER TABLE {tag} RENAME ... (statement not known: the table is {relation[0]}.{relation[1]} now)"
        change = {**_change("rename", ev, statement), "table": tag}
        new_record = _with_table(record, table)
        new = self._stored(record, change) or self._store(record, new_record, change)
        log.info("table %s is %s.%s now: set %r at version %d", tag, relation[0], relation[1], self.set_name,
                 new.version)
        return Switch(new, emit_routes.table_route(new, table, self.registry))

    def _route(self, record: SetRecord, table: Table, statement: str, forced: bool = False) -> TableRoute:
        """table's route in record, its schemas registered: under BACKWARD compatibility, or (forced:
        an operator accepted an incompatible change) under NONE for this one registration."""
        subject = f"{record.topic(table)}-value"
        avro = self.registry is not None and record.config.encoding == "avro"
        try:
            if avro and forced:
                self.registry.set_compatibility(subject, "NONE")
                try:
                    return emit_routes.table_route(record, table, self.registry)
                finally:
                    self.registry.require_backward(subject)
            if avro:
                self.registry.require_backward(subject)
            return emit_routes.table_route(record, table, self.registry)
        except SchemaRejectedError as exc:
            reason = f"the schema registry refused the new schema: {exc}"
            raise SchemaChangeError(schema_change.stop_message(self.set_name, table, statement, reason),
                                    table.qualified, statement, reason) from exc

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
        new = new_record.replace(version=latest.version + 1, change=change, upgraded_at=time.time())
        self.store.update_set(new, znode_version)
        failpoints.hit("after_set_version")  # stored, nothing of it in Kafka yet: a restart must reuse it
        return new


def rewrites_values(before: Table, after: Table) -> bool:
    """Whether the change from before to after rewrote values the table already held, which no
    change event carries: ``character(n)`` to another string type (PostgreSQL's cast drops the
    trailing blanks). The relay requests an online snapshot of the table then, which refreshes
    every row in its topic."""
    old = {c.attnum: c for c in before.columns}
    return any(c.attnum in old and old[c.attnum].kind == "bpchar" and c.kind != "bpchar" and not c.is_array
               for c in after.columns)


def _change(kind: str, ev: Control, statement: str) -> dict:
    return {"kind": kind, "table": ev.table, "statement": statement, "txid": ev.txid, "tick": ev.unit,
            "ordinal": ev.ordinal}


def _accepted(decision: dict) -> dict:
    """What a set version records of the operator's decision."""
    return {k: decision.get(k) for k in ("mode", "by", "at", "reason", "position")}


def _with_table(record: SetRecord, table: Table) -> SetRecord:
    return record.replace(tables=tuple(table if t.qualified == table.qualified else t for t in record.tables))


def _retire(new: SetRecord, record: SetRecord, table: Table, change: dict, why: str) -> SetRecord:
    """new with the topic table had in record listed as retired (SetRecord.retired): dropped, or
    left for the table's next topic generation."""
    entry = {"table": table.qualified, "schema": table.schema, "name": table.name, "topic": record.topic(table),
             "generation": table.generation, "why": why, "tick": change["tick"], "ordinal": change["ordinal"]}
    return new.replace(retired=(*record.retired, entry))


def _mark(kind: str, topic: str, new_topic: str | None = None) -> dict:
    return {"type": kind, "table": topic, "new_topic": new_topic}


def _same_change(a: dict | None, b: dict) -> bool:
    """Whether a stored version's change records change b (the same event: kind, table, txid, unit
    and, where both have it, ordinal; versions stored before ordinals were recorded match without)."""
    if a is None or any(a.get(k) != b[k] for k in ("kind", "table", "txid", "tick")):
        return False
    return "ordinal" not in a or a["ordinal"] == b["ordinal"]
