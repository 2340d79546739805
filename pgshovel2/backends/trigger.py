"""The ``trigger`` backend in the database: PgQ queues, capture triggers, lag, the handoff.

Functions taking a cursor run inside the caller's transaction and never commit, so
the caller decides atomicity. Triggers run ``pgshovel2.capture`` (our C trigger,
sql/capture), or a PL/pgSQL function generated per table (:mod:`.plcapture`; TRUNCATE: ``pgshovel2_pl.capture``) when
the set's capture kind is ``plpgsql``: one ROW trigger for INSERT/UPDATE/DELETE and one
STATEMENT trigger for TRUNCATE per table. The relay reads the queue through
:class:`pgshovel2.relay.pgq.source.PgqSource`.
"""

import json
import time
from typing import Any

from psycopg2 import sql

from pgshovel2.backends import partitions, pgq_install, plcapture, trigger_drop
from pgshovel2.backends.snapshot import ExportedSnapshot, export_txid_snapshot
from pgshovel2.catalog import Table
from pgshovel2.db import connect, one_row
from pgshovel2.errors import CaptureError, PgshovelError, RelayError
from pgshovel2.setrecord import CONSUMER, TriggerCapture

NAME = "trigger"
ENCODE_ROW = "pgshovel2.encode_row"  # rows in capture form (sql/capture)
ENCODE_ROW_PL = "pgshovel2_pl.encode_row"  # the same from sql/capture_pl
# sql/capture: 0.2 records DDL on captured tables in the queues, 0.3 partitions, 0.4 pinned search_path, drop_trigger
EXTENSION_VERSION = "0.4"
TICKER_MAX_LAG = "20 milliseconds"  # latency vs Kafka transactions per second: docs/operations.rst


def encode_row(capture: TriggerCapture) -> str:
    """The SQL function giving rows in the capture form of the set's capture kind."""
    return ENCODE_ROW_PL if capture.kind == "plpgsql" else ENCODE_ROW


def choose_capture(cur, wanted: str | None, pgq: str) -> tuple[str, str]:
    """(kind, why): the capture of a new set (:func:`pgshovel2.backends.plcapture.choose`);
    wanted: the set config's ``capture``, pgq: its ``pgq`` mode (``auto``/``extension``/``pl``)."""
    return plcapture.choose(cur, wanted, EXTENSION_VERSION, pgq_install.extension_possible(cur, pgq))


def install(cur, capture: TriggerCapture, tables: tuple[Table, ...], all_columns: dict,
            before_images: bool = False, pgq: str = "auto", pgq_sql: str | None = None) -> str:
    """Create PgQ and the capture functions when missing, the set's queue, its consumer and
    the triggers; returns the kind of PgQ the database has (``extension`` or ``pl``).

    all_columns: qualified table name -> number of live columns (to tell a
    column subset). before_images: capture the old row of every UPDATE (not
    only of key changes; an unkeyed table's always are, :func:`capture_mode`).
    pgq, pgq_sql: pgq_install.ensure's mode and PL-only file.
    Raises CaptureError when the queue already exists or PgQ/capture cannot be installed.
    """
    queue = capture.queue
    kind = pgq_install.ensure(cur, pgq, pgq_sql)
    if capture.kind == "c":
        ensure_capture(cur, kind)
    cur.execute("SELECT pgq.create_queue(%s)", (queue,))
    if cur.fetchone()[0] == 0:
        raise CaptureError(f"PgQ queue {queue!r} already exists in the database: a set of "
                           "this name was not dropped cleanly; drop the queue or the set first")
    cur.execute("SELECT pgq.set_queue_config(%s, 'ticker_max_lag', %s)", (queue, TICKER_MAX_LAG))
    cur.execute("SELECT pgq.register_consumer(%s, %s)", (queue, capture.consumer))
    install_triggers(cur, capture, tables, all_columns, before_images)
    return kind


def ensure_capture(cur, pgq_kind: str) -> None:
    """The capture functions (``pgshovel2.capture``, ``pgshovel2.encode_row``) for PgQ of pgq_kind.

    With the pgq extension: our C extension (:func:`ensure_extension`). With PgQ's PL-only
    build the C extension cannot be created (it requires the pgq extension): the capture
    functions must already be in schema pgshovel2. Raises CaptureError saying so otherwise.
    """
    if pgq_kind == "extension":
        ensure_extension(cur)
        return
    cur.execute("SELECT to_regproc('pgshovel2.capture') IS NOT NULL AND to_regproc('pgshovel2.encode_row') "
                "IS NOT NULL")
    if not cur.fetchone()[0]:
        raise CaptureError("PgQ in this database is the PL-only build (no pgq extension), so the pgshovel2 C "
                           "capture extension, which requires the pgq extension, cannot be created: use "
                           "'capture: plpgsql' in the set config (or leave capture out to let set create choose)")


def capture_mode(table: Table, all_columns: dict, before_images: bool) -> str:
    """The capture trigger's mode argument for table: ``all`` or ``subset`` (fewer captured
    columns than all_columns[table] live ones), then ``,before`` (the old row of every UPDATE)
    when before_images asks for it or the table is unkeyed: a consumer can only remove the row an
    unkeyed table's UPDATE changed by its old image (docs/wire.rst "Unkeyed tables")."""
    mode = "subset" if len(table.columns) < all_columns[table.qualified] else "all"
    return mode + (",before" if before_images or not table.key else "")


def install_triggers(cur, capture: TriggerCapture, tables: tuple[Table, ...], all_columns: dict,
                     before_images: bool = False) -> None:
    """Create the capture triggers (ROW and TRUNCATE) of tables writing into the set's queue,
    and the TRUNCATE triggers of partitioned tables and their partitions (:mod:`.partitions`).

    Arguments as :func:`install` (modes: :func:`capture_mode`); the queue must exist. Installs or
    updates pgshovel2_pl for capture kind ``plpgsql`` and records each table's layout there.
    """
    queue, trigger = capture.queue, capture.trigger
    function = sql.Identifier(capture.schema, "capture")
    if capture.kind == "plpgsql":
        plcapture.ensure(cur)
    for table in tables:
        attnums = ",".join(str(c.attnum) for c in table.columns)
        by_name = {c.name: c.attnum for c in table.columns}
        keys = ",".join(str(by_name[k]) for k in table.key)
        mode = capture_mode(table, all_columns, before_images)
        target = sql.Identifier(*table.relation)
        row_function = function
        if capture.kind == "plpgsql":  # the row trigger function generated for the table's layout
            row_function = sql.Identifier(capture.schema, plcapture.register(
                cur, queue, table.qualified, attnums, keys, mode, table.sql_name))
        cur.execute(sql.SQL(
            "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW "
            "EXECUTE FUNCTION {}({}, {}, {}, {}, {})").format(
                sql.Identifier(trigger), target, row_function, sql.Literal(queue),
                sql.Literal(table.qualified), sql.Literal(attnums), sql.Literal(keys),
                sql.Literal(mode)))
        cur.execute(sql.SQL(
            "CREATE TRIGGER {} AFTER TRUNCATE ON {} FOR EACH STATEMENT "
            "EXECUTE FUNCTION {}({}, {}, '', '', 'all')").format(
                sql.Identifier(trigger + "_t"), target, function, sql.Literal(queue),
                sql.Literal(table.qualified)))
    partitions.install(cur, partitions.for_trigger(capture), tables)


def without_old_rows(cur, capture: TriggerCapture, tables: tuple[Table, ...]) -> frozenset[str]:
    """The unkeyed tables of tables (qualified names) whose ROW capture trigger of the set exists and
    does not capture every UPDATE's old row (no ``,before`` in its mode: installed by a pgshovel2
    from before unkeyed tables needed it, :func:`capture_mode`). Reads only."""
    out = set()
    for table in tables:
        if table.key:
            continue
        cur.execute("SELECT tgargs FROM pg_catalog.pg_trigger WHERE tgrelid = pg_catalog.to_regclass(%s) "
                    "AND tgname = %s", (table.sql_name, capture.trigger))
        row = cur.fetchone()
        args = bytes(row[0]).split(b"\0") if row is not None else []
        if len(args) >= 5 and b",before" not in args[4]:
            out.add(table.qualified)
    return frozenset(out)


def drop_triggers(cur, capture: TriggerCapture, tables: tuple[Table, ...], everywhere: bool = False) -> list[str]:
    """Drop the set's capture triggers of tables that still exist (and of partitioned tables,
    their partitions' TRUNCATE triggers; everywhere: wherever they are, partitions.uninstall);
    returns the tables touched."""
    trigger = capture.trigger
    partitions.uninstall(cur, partitions.for_trigger(capture), tables, everywhere)
    done = []
    for table in tables:
        cur.execute("SELECT to_regclass(%s)", (table.sql_name,))
        if cur.fetchone()[0] is None:
            continue
        for name in (trigger, trigger + "_t"):
            trigger_drop.drop_trigger(cur, name, table.sql_name, if_exists=True)
        if capture.kind == "plpgsql":
            plcapture.forget(cur, capture.queue, table.sql_name)
        done.append(table.qualified)
    return done


def ensure_extension(cur) -> None:
    """Create the pgshovel2 extension at EXTENSION_VERSION, or update an older one to it.

    Raises CaptureError when that version is not installed on the server
    (run scripts/install.sh or ``make -C sql/capture install``).
    """
    cur.execute("SELECT extversion, pg_has_role(extowner, 'USAGE') FROM pg_extension WHERE extname = 'pgshovel2'")
    row = cur.fetchone()
    if row is not None and row[0] == EXTENSION_VERSION:
        return
    if row is not None and not row[1]:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:
            raise CaptureError(f"the pgshovel2 extension of the set's database is at {row[0]}, this pgshovel2 needs "
                               f"{EXTENSION_VERSION}, and the set's role may not update it: a superuser runs "
                               f"ALTER EXTENSION pgshovel2 UPDATE TO '{EXTENSION_VERSION}' (pgshovel cluster upgrade)")
    cur.execute("SELECT 1 FROM pg_available_extension_versions WHERE name = 'pgshovel2' AND version = %s",
                (EXTENSION_VERSION,))
    if cur.fetchone() is None:
        raise CaptureError(f"version {EXTENSION_VERSION} of the pgshovel2 extension is not installed on the "
                           "database server: build and install sql/capture (scripts/install.sh)")
    if row is None:
        cur.execute("CREATE EXTENSION pgshovel2 VERSION %s", (EXTENSION_VERSION,))
    else:
        cur.execute("ALTER EXTENSION pgshovel2 UPDATE TO %s", (EXTENSION_VERSION,))


def mark_version(cur, capture: TriggerCapture, version: int) -> None:
    """Append a set-version marker (ev_type ``V``, ev_data ``{"version": N}``) to the set's queue.

    Call it in the database transaction that replaces the set's triggers, after the
    record of version N is in ZooKeeper (history/N): the relay switches to version N's
    tables, columns and schemas exactly there (pgshovel2.relay.control).
    """
    cur.execute("SELECT pgq.insert_event(%s, 'V', %s)", (capture.queue, json.dumps({"version": version})))


def column_counts(cur, tables: tuple[Table, ...]) -> dict[str, int]:
    """Qualified table name -> number of live (not dropped) columns."""
    counts = {}
    for t in tables:
        cur.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped", (t.sql_name,))
        counts[t.qualified] = cur.fetchone()[0]
    return counts


def uninstall(cur, capture: TriggerCapture, tables: tuple[Table, ...]) -> list[str]:
    """Drop the set's triggers, unregister its consumer and drop its queue.

    Tolerates objects that are already gone; returns what it removed.
    """
    queue = capture.queue
    done = [f"triggers on {t}" for t in drop_triggers(cur, capture, tables, everywhere=True)]
    if capture.kind == "plpgsql":
        plcapture.forget(cur, queue)
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'pgq'")
    if cur.fetchone() is None:
        return done
    cur.execute("SELECT consumer_name FROM pgq.get_consumer_info() WHERE queue_name = %s", (queue,))
    for (consumer,) in cur.fetchall():
        cur.execute("SELECT pgq.unregister_consumer(%s, %s)", (queue, consumer))
        done.append(f"consumer {consumer}")
    cur.execute("SELECT 1 FROM pgq.queue WHERE queue_name = %s", (queue,))
    if cur.fetchone():
        cur.execute("SELECT pgq.drop_queue(%s)", (queue,))
        done.append(f"queue {queue}")
    return done


def export(dsn: str, capture: TriggerCapture, error: type[PgshovelError]) -> ExportedSnapshot:
    """Export a snapshot of the set's database for a copy, read through the encode_row of
    the set's capture kind; its handoff is the exporting transaction's txid snapshot: a
    queued change is in the copy exactly when its transaction is visible in it. Raises error."""
    return export_txid_snapshot(dsn, encode_row(capture), error)


def queue_lag(dsn: str, capture: TriggerCapture) -> dict[str, Any]:
    """{lag_seconds, pending_events, last_tick, unticked_events} of the relay's consumer, or {error}
    when the database does not answer or has no such consumer (for ``set status``).
    pending_events: events of the ticks the consumer has not finished (PgQ's count, up to the
    queue's last tick); unticked_events: events queued after the last tick (pgq.get_queue_info's
    ev_new), which no batch holds until a ticker (pgqd or the relay) ticks -- with neither running
    they wait there while pending_events says 0 (None: the queue's info could not be read)."""
    row = one_row(dsn, "SELECT extract(epoch FROM lag)::float8, pending_events, last_tick "
                  "FROM pgq.get_consumer_info(%s, %s)", (capture.queue, capture.consumer),
                  ("lag_seconds", "pending_events", "last_tick"))
    if not row:
        return {"error": f"no consumer {capture.consumer} on queue {capture.queue}"}
    if "error" not in row:
        new = one_row(dsn, "SELECT ev_new FROM pgq.get_queue_info(%s)", (capture.queue,), ("unticked_events",))
        row["unticked_events"] = new.get("unticked_events") if new else None
    return row


def wait_caught_up(dsn: str, queue: str, consumer: str = CONSUMER, timeout: float = 120.0) -> int:
    """Wait until consumer (the relay's) has finished every event of queue committed before the call.

    Forces a tick after the last committed event, then waits until the consumer's last
    finished tick reaches it; returns that tick id. Raises RelayError after timeout seconds.
    """
    conn = connect(dsn, f"queue {queue}", RelayError)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pgq.force_tick(%s)", (queue,))
            cur.execute("SELECT pgq.ticker(%s)", (queue,))
            cur.execute("SELECT last_tick_id FROM pgq.get_queue_info(%s)", (queue,))
            target = cur.fetchone()[0]
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SELECT last_tick FROM pgq.get_consumer_info(%s, %s)", (queue, consumer))
                if cur.fetchone()[0] >= target:
                    return target
                if time.monotonic() > deadline:
                    raise RelayError(f"consumer {consumer} of queue {queue} did not reach tick "
                                     f"{target} within {timeout:g}s: is the relay running?")
                time.sleep(0.1)
    finally:
        conn.close()
