"""A set's lifecycle steps in its database, each done the way the set's backend does it: the one
place ``pgshovel2.ops`` (set create, upgrade, drop, repoint, status, audit, cluster upgrade) has a
set's backend picked, as :mod:`pgshovel2.backends` does for rows, snapshots and lag and
:mod:`pgshovel2.backends.dropped` for the relay's drop watch.

Every function takes a cursor of the set's database (the admin role's, in the command's
transaction, unless said) and the set's record or config; none commits.
"""

from dataclasses import replace
from typing import Any

from pgshovel2 import catalog
from pgshovel2.backends import logical, logical_version, partitions, pgoutput, privileges, trigger
from pgshovel2.catalog import Table
from pgshovel2.config import SetConfig
from pgshovel2.setrecord import PGOUTPUT, SetRecord, SlotCapture, TriggerCapture
from pgshovel2.wire import Lsn


def decoder(cur, config: SetConfig, change: dict[str, Any]) -> str | None:
    """A new logical set's output plugin (logical.choose_decoder: PLUGIN or PGOUTPUT), with its reason
    in change["decoder"] and what the server's slot limits mean for the set in change["notes"]
    (logical.slot_limit_notes); None for a trigger set."""
    if config.backend != "logical":
        return None
    plugin, why = logical.choose_decoder(cur, config.decoder)
    change["decoder"] = f"{plugin} ({why})"
    if limits := logical.slot_limit_notes(cur):
        change.setdefault("notes", []).extend(limits)
    return plugin


def resolve_tables(conn, name: str, config: SetConfig, config_path: str, plugin: str | None,
                   notes: list[str] | None = None) -> tuple[Table, ...]:
    """config's tables resolved against the catalog of conn (catalog.resolve_set), without the
    generated columns the set's path cannot carry (pgoutput before PostgreSQL 18: stored ones;
    every path: virtual ones); a logical set's (plugin: its output plugin, None for a trigger set)
    with the columns an UPDATE may leave unlogged made nullable (logical.unlogged_nullable). What
    that changed is appended to notes. Raises ConfigError naming config_path."""
    with conn.cursor() as cur:
        stored = not (plugin == PGOUTPUT and not pgoutput.sends_generated(cur))
        tables = catalog.resolve_set(conn, name, config, config_path, stored_generated=stored, notes=notes)
        if plugin is None:
            return tables
        return logical.unlogged_nullable(cur, tables, notes, config.envelope == "debezium")


def with_capture(cur, record: SetRecord) -> SetRecord:
    """A new trigger set's record with its capture kind chosen, and why (trigger.choose_capture);
    a logical set's as it is."""
    if isinstance(record.capture, SlotCapture):
        return record
    kind, why = trigger.choose_capture(cur, record.config.capture, record.config.pgq)
    return record.replace(capture=replace(record.capture, kind=kind, why=why))


def missing_privileges(cur, record: SetRecord, config: SetConfig) -> list[str]:
    """What the admin role (cur's) or the relay role lack for record's set at config
    (privileges.missing); a trigger set's config without a capture kind is checked for the kind
    set create chose."""
    capture = record.capture
    if isinstance(capture, SlotCapture):
        return privileges.missing(cur, config, capture.plugin)
    if config.capture is None:
        config = replace(config, capture=capture.kind)
    return privileges.missing(cur, config, None)


def check_new(cur, record: SetRecord, config_path: str) -> None:
    """Raise CaptureError or ConfigError for what a new logical set cannot read (the server's
    logical decoding, the tables' replica identities: logical.check_server, logical.check_tables);
    nothing for a trigger set, whose checks are its install's."""
    if isinstance(record.capture, SlotCapture):
        logical.check_server(cur, record.capture.plugin)
        logical.check_tables(cur, record.config, record.tables, config_path, record.capture.plugin)


def install(cur, record: SetRecord, config_path: str) -> SetRecord:
    """The capture objects of a new set: a trigger set's queue, consumer and triggers (returns the
    record with the kind of PgQ installed), a logical set's publication and its partitions' TRUNCATE
    triggers (the slot is the relay's). Raises CaptureError or ConfigError."""
    capture = record.capture
    if isinstance(capture, SlotCapture):
        logical.check_tables(cur, record.config, record.tables, config_path, capture.plugin)
        logical.install(cur, capture.slot, capture.plugin, record.tables, existing=record.config.publication)
        partitions.install_logical(cur, record, record.tables)
        return record
    counts = trigger.column_counts(cur, record.tables)
    kind = trigger.install(cur, capture, record.tables, counts,
                           before_images=record.config.envelope == "debezium", pgq=record.config.pgq)
    return record.replace(capture=replace(capture, pgq=kind))


def uninstall(cur, record: SetRecord) -> list[str]:
    """Remove a set's capture objects (a trigger set's triggers, consumer and queue; a logical set's
    partition triggers and the publication it made); returns what was removed. Raises CaptureError
    (a logical set's slot in use). The slot goes after the commit: :func:`release`."""
    capture = record.capture
    if not isinstance(capture, SlotCapture):
        return trigger.uninstall(cur, capture, record.tables)
    logical.check_droppable(cur, capture.slot)
    done = partitions.uninstall(cur, partitions.for_record(record), record.tables, everywhere=True)
    if record.owns_publication and logical.drop_publication(cur, capture.slot):
        done.append(f"publication {capture.slot}")
    return done


def release(record: SetRecord) -> list[str]:
    """After a set's drop committed: drop a logical set's replication slot (its own connection);
    returns what was dropped."""
    if isinstance(record.capture, SlotCapture) and logical.drop_slot(record.dsn, record.capture.slot):
        return [f"replication slot {record.capture.slot}"]
    return []


def without_old_rows(conn, record: SetRecord, tables: tuple[Table, ...]) -> frozenset[str]:
    """The unkeyed tables of a trigger set, among record's and in tables, whose capture trigger does not
    write every UPDATE's old row (installed by an older pgshovel2: trigger.without_old_rows); empty
    for a logical set."""
    if not isinstance(record.capture, TriggerCapture):
        return frozenset()
    kept = {t.qualified for t in record.tables}
    with conn.cursor() as cur:
        return trigger.without_old_rows(cur, record.capture, tuple(t for t in tables if t.qualified in kept))


def upgrade(cur, record: SetRecord, config: SetConfig, tables: tuple[Table, ...], touched: set[str],
            to_version: int, source: str) -> None:
    """Take record's set to version to_version with tables (touched: the tags added, removed or
    changed). Trigger sets: the touched tables' triggers replaced and the version event queued.
    Logical sets: the touched tables locked, their partitions' TRUNCATE triggers replaced, then the
    publication and the version message (logical_version). Raises CaptureError, ConfigError (source)."""
    capture = record.capture
    if isinstance(capture, TriggerCapture):
        old = tuple(t for t in record.tables if t.qualified in touched)
        new = tuple(t for t in tables if t.qualified in touched)
        trigger.drop_triggers(cur, capture, old)
        trigger.install_triggers(cur, capture, new, trigger.column_counts(cur, new),
                                 before_images=config.envelope == "debezium")
        trigger.mark_version(cur, capture, to_version)
        return
    logical.check_tables(cur, config, tables, source, capture.plugin)
    logical_version.lock_tables(cur, [t for t in (*record.tables, *tables) if t.qualified in touched])
    partitions.uninstall(cur, partitions.for_record(record), tuple(t for t in record.tables if t.qualified in touched))
    partitions.install_logical(cur, record, tuple(t for t in tables if t.qualified in touched))
    mode_all = catalog.all_column_tags(config, tables)
    logical_version.mark_version(cur, capture.slot, capture.plugin, to_version, tables, mode_all,
                                 existing=config.publication)


def holds(cur, record: SetRecord) -> bool:
    """Whether the database of cur has what record's set reads from: a trigger set's queue with its
    consumer, a logical set's publication (pgoutput; our plugin needs none: True)."""
    capture = record.capture
    if isinstance(capture, TriggerCapture):
        cur.execute("SELECT to_regprocedure('pgq.get_consumer_info(text,text)') IS NOT NULL")
        if not cur.fetchone()[0]:
            return False
        cur.execute("SELECT count(*) FROM pgq.get_consumer_info() WHERE queue_name = %s AND consumer_name = %s",
                    (capture.queue, capture.consumer))
        return cur.fetchone()[0] == 1
    return capture.plugin != PGOUTPUT or pgoutput.publication_exists(cur, record.publication)


def reads_from(record: SetRecord) -> str:
    """What record's set reads from, for operators: ``queue Q with consumer C``, ``slot S`` or
    ``publication of slot S``."""
    capture = record.capture
    if isinstance(capture, TriggerCapture):
        return f"queue {capture.queue} with consumer {capture.consumer}"
    return f"publication of slot {capture.slot}" if capture.plugin == PGOUTPUT else f"slot {capture.slot}"


def stream_bound(cur, record: SetRecord, wal_insert_lsn: str | None) -> int | None:
    """The unit the set's stream has reached in the snapshot of cur: a trigger set's queue's last
    tick id (0 before its first), a logical set's WAL insert LSN (wal_insert_lsn, as text, read in
    that snapshot's transaction) as an integer; None for a logical set on a standby (no LSN)."""
    if isinstance(record.capture, SlotCapture):
        return None if wal_insert_lsn is None else int(Lsn.parse(wal_insert_lsn))
    cur.execute("SELECT last_tick_id FROM pgq.get_queue_info(%s)", (record.capture.queue,))
    return cur.fetchone()[0] or 0


def uses_plcapture(record: SetRecord, partitioned: bool) -> bool:
    """Whether record's set runs functions of schema pgshovel2_pl: a trigger set with the PL/pgSQL
    capture; a logical set with partitioned tables (their TRUNCATE triggers; partitioned: it has)."""
    if isinstance(record.capture, SlotCapture):
        return partitioned
    return record.capture.kind == "plpgsql"

