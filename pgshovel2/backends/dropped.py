"""Which of a set's tables were dropped, where no event trigger said so, and the marker that ends
them in the set's stream at a place after every change of theirs.

The C capture's event trigger writes a table's end into the queue in the DROP TABLE's own
transaction (``S`` with ``"dropped": true``, sql/capture). The PL/pgSQL capture (no event
triggers without superuser) and logical decoding (nothing of a DROP in the change stream) have
no such event: the relay finds dropped tables itself (:mod:`pgshovel2.relay.ddl.drop_watch`) and
writes the marker here, in a transaction of its own that starts after the DROP committed, so it
commits after every change of the table:

- trigger sets: a table is captured while a trigger of the set's trigger name carries its tag
  (the trigger's second argument; the C and the PL/pgSQL capture have the same arguments, and
  a renamed table keeps its triggers); the marker is the ``S`` event the event trigger writes
  (``pgq.insert_event``), statement ``"DROP TABLE ... (noticed by the relay)"``. Its ev_id is
  after every event of the table (PgQ orders a batch by ev_id; a tick that sees its transaction
  sees every transaction committed before it began);
- logical sets: a table exists while its pg_class OID does (a renamed table keeps it); the
  marker is the transactional logical message ``pgshovel2.version`` ``{"dropped": tag,
  "statement": ...}`` (no ``version``, no ``tables``: our plugin keeps its tables, both decoders
  deliver it in commit order, after every change committed before it).

Only a table missing that way counts: a name that no longer resolves is not a drop. A table
renamed (RENAME TABLE, SET SCHEMA) is found the same way; where the set's version does not know
its name now, a rename marker of the same kinds (``V`` / ``pgshovel2.version`` ``{"renamed": tag,
"schema", "name"}``) lets the relay record it (SQL on the table then uses its name now), also
where no change of the table follows the rename to carry its new layout.
"""

import json

from pgshovel2.catalog import Table
from pgshovel2.setrecord import SetRecord, SlotCapture

VERSION_PREFIX = "pgshovel2.version"  # as backends.logical_version (its importers are not needed here)


def statement(table: Table, why: str) -> str:
    """The statement a marker records: the drop is known, the statement is not."""
    return f"DROP TABLE {table.qualified} (statement not known: {why})"


def trigger_captured(cur, trigger: str) -> dict[str, tuple[str, str]]:
    """Tag -> (schema, name) now of the tables a row trigger named trigger captures in the database
    of cur. A partitioned table's trigger is cloned onto its partitions (same name and arguments,
    tgparentid set): only the table's own trigger names where the table is."""
    cur.execute("SELECT t.tgargs, n.nspname::text, c.relname::text FROM pg_catalog.pg_trigger t "
                "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = "
                "c.relnamespace WHERE t.tgname = %s AND t.tgparentid = 0", (trigger,))
    tags = {}
    for args, schema, name in cur.fetchall():
        parts = bytes(args).split(b"\x00")
        if len(parts) > 2:
            tags[parts[1].decode("utf-8")] = (schema, name)
    return tags


def existing_oids(cur, oids: list[int]) -> dict[int, tuple[str, str]]:
    """Which of oids are relations in the database of cur: OID -> (schema, name) now."""
    cur.execute("SELECT c.oid::int8, n.nspname::text, c.relname::text FROM pg_catalog.pg_class c JOIN "
                "pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY(%s::oid[])", (oids,))
    return {r[0]: (r[1], r[2]) for r in cur.fetchall()}


def oid_of(cur, table: Table) -> int | None:
    """table's OID by its name (None: no such relation now)."""
    cur.execute("SELECT pg_catalog.to_regclass(%s)::oid::int8", (table.sql_name,))
    row = cur.fetchone()
    return row[0] if row else None


def mark_trigger_drop(cur, queue: str, table: Table, why: str) -> None:
    """Append the dropped table's ``S`` event to queue (commit it: autocommit, or the caller)."""
    payload = json.dumps({"schema": table.schema, "name": table.name, "dropped": True, "noticed": why})
    cur.execute("SELECT pgq.insert_event(%s, 'S', %s, %s, %s, NULL, NULL)",
                (queue, payload, table.qualified, json.dumps(statement(table, why))))


def mark_logical_drop(cur, table: Table, why: str) -> None:
    """Write the dropped table's marker into the WAL (commit it: autocommit, or the caller)."""
    message = json.dumps({"dropped": table.qualified, "statement": statement(table, why)})
    cur.execute("SELECT pg_catalog.pg_logical_emit_message(true, %s, %s)", (VERSION_PREFIX, message))


def _rename_payload(table: Table, relation: tuple[str, str]) -> str:
    return json.dumps({"renamed": table.qualified, "schema": relation[0], "name": relation[1]})


def mark_trigger_rename(cur, queue: str, table: Table, relation: tuple[str, str]) -> None:
    """Append a rename marker of table (now at relation: schema, name) to queue (commit it)."""
    cur.execute("SELECT pgq.insert_event(%s, 'V', %s, %s, NULL, NULL, NULL)",
                (queue, _rename_payload(table, relation), table.qualified))


def mark_logical_rename(cur, table: Table, relation: tuple[str, str]) -> None:
    """Write a rename marker of table (now at relation: schema, name) into the WAL (commit it)."""
    cur.execute("SELECT pg_catalog.pg_logical_emit_message(true, %s, %s)",
                (VERSION_PREFIX, _rename_payload(table, relation)))


def tables_there(cur, record: SetRecord, tables: list[Table], oids: dict[str, int]) -> dict[str, tuple[str, str]]:
    """Tag -> (schema, name) now of record's tables still there: a trigger set's by its triggers,
    a logical set's by OID (oids: tag -> OID, filled here for tables found; a table whose OID is not
    known yet counts as there, as it is)."""
    if not isinstance(record.capture, SlotCapture):
        return trigger_captured(cur, record.capture.trigger)
    for t in tables:
        if t.qualified not in oids and (oid := oid_of(cur, t)) is not None:
            oids[t.qualified] = oid
    there = existing_oids(cur, [oids[t.qualified] for t in tables if t.qualified in oids])
    return {t.qualified: there[oids[t.qualified]] if t.qualified in oids else t.relation
            for t in tables if t.qualified not in oids or oids[t.qualified] in there}


def mark_drop(cur, record: SetRecord, table: Table, why: str) -> None:
    """Write the marker that ends table in record's stream (the set's backend's kind of marker)."""
    if isinstance(record.capture, SlotCapture):
        mark_logical_drop(cur, table, why)
    else:
        mark_trigger_drop(cur, record.capture.queue, table, why)


def mark_rename(cur, record: SetRecord, table: Table, relation: tuple[str, str]) -> None:
    """Write the marker that records table's name now, relation (schema, name), in record's stream."""
    if isinstance(record.capture, SlotCapture):
        mark_logical_rename(cur, table, relation)
    else:
        mark_trigger_rename(cur, record.capture.queue, table, relation)
