"""The ``logical`` backend in the database: checks, the slot's lifecycle, lag, the handoff.

A logical set reads the WAL from one replication slot per set through its decoder: our
output plugin ``pgshovel2_decoder`` (sql/decoder), or PostgreSQL's ``pgoutput`` with a
publication per set (:mod:`pgshovel2.backends.pgoutput`; stock servers without our C code). ``set create`` checks the
server can decode for it (wal_level, the plugin allowed and installed), that
each table logs in its WAL what the relay needs (replica identity, below),
and creates the ``pgshovel2_decoder`` extension. The slot itself is created by
the relay's first start (it must export the snapshot of its consistent point
for the initial copy); ``set drop`` drops it.

Replica identity rules (``ALTER TABLE ... REPLICA IDENTITY``): a keyed table's
key columns must be in what the WAL logs for an UPDATE/DELETE's old row (its
primary key with DEFAULT, the index with USING INDEX, every column with FULL);
NOTHING is refused. An unkeyed table (``allow_unkeyed``) needs FULL: its UPDATEs
and DELETEs travel with their whole old rows (docs/wire.rst "Unkeyed tables").
An UPDATE that does not change a TOASTed value does not log it; only FULL logs
the old row with its values inline, from which the decoders take it. Without
FULL the value is null and the message lists the column in its
``pgshovel.unchanged`` header (docs/wire.rst): so in a table whose identity is
not FULL, a NOT NULL variable-length column that is not part of the key is
nullable in the set's schemas (:func:`unlogged_nullable`). The ``debezium``
envelope takes the same identities, as Debezium does: with DEFAULT or USING INDEX an UPDATE's
``before`` is null unless the key changed, and a DELETE's (or a key change's) ``before`` holds
the identity's columns only, the others null, so every NOT NULL column that is not part of the
key is nullable in such a table's schemas too (docs/wire.rst, "Envelope debezium").

Functions taking a cursor run in the caller's transaction and never commit. The relay
streams the slot through :class:`pgshovel2.relay.logical.source.LogicalSource`.
"""

import dataclasses
import logging
import time
import uuid
from typing import Any

import psycopg2
import psycopg2.extras
from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.backends import pgoutput
from pgshovel2.backends.slot_failover import FAILOVER_VERSION
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.catalog import Table, raise_all
from pgshovel2.config import SetConfig
from pgshovel2.db import connect, one_row, open_connection
from pgshovel2.errors import CaptureError, ConfigError, PgshovelError, RelayError
from pgshovel2.setrecord import PLUGIN
from pgshovel2.txids import ConsistentPoint
from pgshovel2.wire import Lsn

log = logging.getLogger(__name__)

NAME = "logical"
EXTENSION = "pgshovel2_decoder"
ENCODE_ROW = "pgshovel2_decoder.encode_row"  # rows in capture form (sql/decoder)

_IDENTITY_SQL = """
SELECT c.relreplident,
       ARRAY(SELECT a.attname::text FROM pg_index i JOIN pg_attribute a
             ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
             WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'i' THEN i.indisreplident
                                                              ELSE i.indisprimary END)
FROM pg_class c WHERE c.oid = %(table)s::regclass
"""

# NOT NULL variable-length columns of a table whose replica identity is not FULL: PostgreSQL may
# store their values out of line, and an UPDATE that leaves such a value unchanged does not log it.
_UNLOGGED_SQL = """
SELECT a.attname::text FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.oid = %s::regclass AND c.relreplident <> 'f' AND a.attnum > 0 AND NOT a.attisdropped
  AND a.attnotnull AND (a.attlen = -1 OR %s)
"""


def choose_decoder(cur, configured: str | None) -> tuple[str, str]:
    """(decoder, why): configured when given, else pgshovel2_decoder when its extension is
    available on the server, else pgoutput."""
    if configured is not None:
        return (PLUGIN if configured == "pgshovel2" else pgoutput.NAME), f"decoder: {configured} in the config"
    cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (EXTENSION,))
    if cur.fetchone() is not None:
        return PLUGIN, f"the {EXTENSION} extension is available on the server"
    return pgoutput.NAME, f"the {EXTENSION} extension is not installed on the server"


def check_server(cur, plugin: str = PLUGIN) -> None:
    """Raise CaptureError unless the server can decode with plugin: wal_level logical, the
    plugin allowed by Debian's ``output_plugin_libraries`` (when the server has that setting and
    the role may read it)
    and, for our plugin, the pgshovel2_decoder extension installed on the server."""
    # pg_settings, not current_setting(): a setting only superusers may read is no row there
    cur.execute("SELECT current_setting('wal_level'), (SELECT setting FROM pg_settings "
                "WHERE name = 'output_plugin_libraries')")
    wal_level, allowed = cur.fetchone()
    if wal_level != "logical":
        raise CaptureError(f"the database server has wal_level = {wal_level}: the logical backend needs "
                           "wal_level = logical in postgresql.conf (a restart is needed)")
    if allowed is not None and plugin not in [p.strip() for p in allowed.split(",")]:
        raise CaptureError(f"output plugin {plugin} is not in the server's output_plugin_libraries "
                           f"({allowed!r}): add it in postgresql.conf and reload (scripts/stack.sh does)")
    if plugin != PLUGIN:
        return
    cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (EXTENSION,))
    if cur.fetchone() is None:
        raise CaptureError(f"the {EXTENSION} extension is not installed on the database server: build and "
                           "install sql/decoder (scripts/install.sh), or use decoder: pgoutput")


_SLOT_LIMITS_SQL = """
SELECT (SELECT setting::int8 FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
       (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_replication_slot_timeout')
"""


def slot_limit_notes(cur) -> list[str]:
    """What the server's slot limits mean for a set's slot, one note each: max_slot_wal_keep_size
    (MB; -1: none, so a stopped relay lets the slot keep WAL until the disk fills; else PostgreSQL
    invalidates a slot that far behind) and PostgreSQL 18's idle_replication_slot_timeout (s;
    0: off). Reads pg_settings only; a setting the server lacks is left out."""
    cur.execute(_SLOT_LIMITS_SQL)
    keep_mb, idle_s = cur.fetchone()
    notes = []
    if keep_mb == -1:
        notes.append("max_slot_wal_keep_size is -1 (no limit): while no relay confirms the slot it keeps WAL until "
                     "the disk fills; alert on pgshovel2_relay_slot_retained_bytes (monitoring/), or set a limit")
    elif keep_mb is not None:
        notes.append(f"max_slot_wal_keep_size is {keep_mb} MB: a relay stopped until the slot falls that far behind "
                     "loses the slot (PostgreSQL invalidates it) and the set must be re-bootstrapped")
    if idle_s:
        notes.append(f"idle_replication_slot_timeout is {idle_s} s: PostgreSQL invalidates the slot when no relay "
                     "has used it that long (the set must then be re-bootstrapped): keep a relay running")
    return notes


def check_tables(cur, config: SetConfig, tables: tuple[Table, ...], source: str, plugin: str = PLUGIN) -> None:
    """Raise ConfigError naming every table (``tables[i]``) whose replica identity does not
    log what the relay needs (module docstring), all of them in one error. With pgoutput a
    table must also log some old row (PostgreSQL refuses UPDATE/DELETE on a published table
    without one, and pgoutput sends no DELETE without it), and must not have REPLICA IDENTITY
    FULL with a virtual generated column (PostgreSQL 18 refuses UPDATE/DELETE of such a published
    table: the application's writes would fail). A partitioned table's leaf partitions are checked
    too, each by its own identity (the one the WAL logs its rows by), named."""
    problems = []
    for i, table in enumerate(tables):
        for target in (table.sql_name, *_leaves(cur, table)):
            problem, fix = _relation_problem(cur, config, table, target, plugin)
            if problem:
                what = "" if target == table.sql_name else f"its partition {target}: "
                problems.append(ConfigError(source, f"tables[{i}]", table.qualified, f"{what}{problem}{fix}"))
    raise_all(problems, source)


def _leaves(cur, table: Table) -> list[str]:
    """The leaf partitions of table (none unless it is partitioned), as regclass texts."""
    cur.execute("SELECT p.relid::regclass::text FROM pg_partition_tree(to_regclass(%s)) p JOIN pg_class c "
                "ON c.oid = p.relid WHERE p.isleaf AND p.level > 0 AND c.relkind = 'r' ORDER BY 1", (table.sql_name,))
    return [name for (name,) in cur.fetchall()]


def _relation_problem(cur, config: SetConfig, table: Table, relation: str, plugin: str) -> tuple[str | None, str]:
    """(why relation's replica identity (table itself, or a partition of it) is not enough, or None;
    the fix to append to it)."""
    cur.execute(_IDENTITY_SQL, {"table": relation})
    ident, ident_cols = cur.fetchone()
    fix = f": run ALTER TABLE {relation} REPLICA IDENTITY FULL (or use backend: trigger)"
    problem = _identity_problem(table, config, ident, set(ident_cols))
    if problem is None and plugin == pgoutput.NAME and ident != "f" and not ident_cols:
        problem = ("with decoder pgoutput its replica identity must log an old row, but it logs none "
                   "(NOTHING, or DEFAULT without a primary key)")
    if problem is None and plugin == pgoutput.NAME and ident == "f" and _has_virtual(cur, relation):
        problem = ("it has a virtual generated column, which pgoutput cannot publish, and PostgreSQL refuses "
                   "UPDATE and DELETE of a published table whose REPLICA IDENTITY FULL includes an unpublished "
                   "generated column: give it REPLICA IDENTITY DEFAULT (its primary key)")
        fix = " (or use backend: trigger)"
    return problem, fix


def _has_virtual(cur, relation: str) -> bool:
    """Whether relation has a virtual generated column (PostgreSQL 18's attgenerated 'v')."""
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = 'v')", (relation,))
    return bool(cur.fetchone()[0])


def _identity_problem(table: Table, config: SetConfig, ident: str, ident_cols: set[str]) -> str | None:
    """Why table's replica identity ident (relreplident) is not enough for the set, or None
    (module docstring). ident_cols: the identity's columns."""
    if ident == "f":
        return None
    kind = {"d": "DEFAULT", "i": "USING INDEX", "n": "NOTHING"}[ident]
    if ident == "n":
        ident_cols = set()
    if not table.key:
        return (f"it has no key (allow_unkeyed), so a consumer can only remove the row an UPDATE or DELETE "
                f"changed by its whole old row, which the WAL holds only with REPLICA IDENTITY FULL, but its "
                f"replica identity is {kind}")
    if table.key and not set(table.key) <= ident_cols:
        return (f"its key ({', '.join(table.key)}) is not in what the WAL logs of an UPDATE's or DELETE's "
                f"old row (replica identity {kind}: {', '.join(sorted(ident_cols)) or 'nothing'})")
    return None


def unlogged_nullable(cur, tables: tuple[Table, ...], notes: list[str] | None = None,
                      debezium: bool = False) -> tuple[Table, ...]:
    """tables with the columns whose values an UPDATE may leave unchanged and unlogged made
    nullable: NOT NULL, variable-length (pg_attribute.attlen -1: PostgreSQL may store the value
    out of line), not part of the key, in a table whose replica identity is not FULL. Such a
    value travels as null with the ``pgshovel.unchanged`` header (docs/wire.rst), so its Avro
    field must admit null. debezium (envelope debezium): every NOT NULL column not part of the
    key, whatever its length, since a DELETE's ``before`` holds the replica identity's columns
    only (the others null). One line per table changed goes to notes. Reads only."""
    out = []
    for table in tables:
        cur.execute(_UNLOGGED_SQL, (table.sql_name, debezium))
        unlogged = {r[0] for r in cur.fetchall()} - set(table.key)
        changed = [c.name for c in table.columns if c.name in unlogged and not c.nullable]
        if changed and notes is not None:
            notes.append(f"{table.qualified}: NOT NULL column(s) {', '.join(names.quote_ident(c) for c in changed)} "
                         "nullable in the value schema: with replica identity other than FULL " +
                         ("a DELETE's before holds the key only" if debezium else "an UPDATE that leaves such a "
                          "value unchanged does not log it (null + header pgshovel.unchanged)"))
        out.append(dataclasses.replace(table, columns=tuple(
            dataclasses.replace(c, nullable=True) if c.name in changed else c for c in table.columns)))
    return tuple(out)


def install(cur, slot: str, plugin: str = PLUGIN, tables: tuple[Table, ...] = (), existing: str | None = None) -> None:
    """Create the pgshovel2_decoder extension (our plugin) or the set's publication of tables
    (pgoutput), or check existing, the DBA's publication, covers them (pgoutput.check_existing);
    raise CaptureError when slot (or the publication) already exists (a set of this name was not
    dropped cleanly), the publication cannot be created, or existing does not do. The slot is
    created by the relay."""
    check_server(cur, plugin)
    if plugin == PLUGIN:
        ensure_decoder_extension(cur)
    elif existing:
        pgoutput.check_existing(cur, existing, tables)
    else:
        _create_publication(cur, slot, tables)
    cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if cur.fetchone() is not None:
        raise CaptureError(f"replication slot {slot!r} already exists: a set of this name was not dropped "
                           f"cleanly; drop it with SELECT pg_drop_replication_slot('{slot}')")


def ensure_decoder_extension(cur) -> None:
    """Create the pgshovel2_decoder extension at the server's default version, or update an older
    one to it where cur's role may (its owner, a superuser); otherwise leave it, with a warning
    naming the statement a superuser runs (0.2 pins its functions' search_path)."""
    cur.execute("SELECT e.extversion, a.default_version, pg_has_role(e.extowner, 'USAGE') "
                "FROM pg_available_extensions a LEFT JOIN pg_extension e ON e.extname = a.name WHERE a.name = %s",
                (EXTENSION,))
    row = cur.fetchone()
    if row is None or row[0] is None:
        cur.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(EXTENSION)))
        return
    installed, default, owner = row
    if installed == default:
        return
    if owner:
        cur.execute(sql.SQL("ALTER EXTENSION {} UPDATE").format(sql.Identifier(EXTENSION)))
    else:
        log.warning("extension %s is at %s, the server has %s: a superuser runs ALTER EXTENSION %s UPDATE",
                    EXTENSION, installed, default, EXTENSION)


def _create_publication(cur, slot: str, tables: tuple[Table, ...]) -> None:
    name = pgoutput.publication_name(slot)
    if pgoutput.publication_exists(cur, name):
        raise CaptureError(f"publication {name!r} already exists: a set of this name was not dropped cleanly; "
                           f"drop it with DROP PUBLICATION {name}")
    cur.execute("SAVEPOINT pgshovel2_publication")
    try:
        statement = pgoutput.create_publication(cur, name, tables)
    except psycopg2.Error as exc:
        cur.execute("ROLLBACK TO SAVEPOINT pgshovel2_publication")
        raise CaptureError(f"cannot create publication {name!r} for the set's tables: {str(exc).strip()} "
                           "(the set's database user must own the tables and may CREATE in the database)") from exc
    log.info("%s", statement)


def drop_publication(cur, slot: str) -> bool:
    """Drop the set's publication (pgoutput) in the caller's transaction; True when it existed."""
    name = pgoutput.publication_name(slot)
    existed = pgoutput.publication_exists(cur, name)
    pgoutput.drop_publication(cur, name)
    return existed


def check_droppable(cur, slot: str) -> None:
    """Raise CaptureError when a relay is streaming from slot (it cannot be dropped then)."""
    cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,))
    row = cur.fetchone()
    if row is not None:
        raise CaptureError(f"replication slot {slot!r} is in use by a relay (server pid {row[0]}): "
                           "stop the set's relays before dropping the set")


def drop_slot(dsn: str, slot: str) -> bool:
    """Drop slot (autocommit; a slot is not transactional); True when it existed.

    Raises CaptureError naming the slot when it cannot be dropped.
    """
    conn = connect(dsn, f"slot {slot}")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s", (slot,))
            return cur.rowcount > 0
    except Exception as exc:
        raise CaptureError(f"could not drop replication slot {slot!r}: {str(exc).strip()}; drop it with "
                           f"SELECT pg_drop_replication_slot('{slot}') once no relay uses it") from exc
    finally:
        conn.close()


def slot_exists(cur, slot: str) -> bool:
    """True when the replication slot exists on the server."""
    cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return cur.fetchone() is not None


def replication_connection(dsn: str, what: str, error: type[PgshovelError] = RelayError, plugin: str = PLUGIN,
                           decoding_work_mem: str | None = None):
    """A psycopg2 LogicalReplicationConnection to dsn (pgoutput: with the pinned settings its
    text output depends on; decoding_work_mem: the session's logical_decoding_work_mem, e.g.
    ``64kB``); raises error naming what on failure."""
    options = [pgoutput.libpq_options()] if plugin == pgoutput.NAME else []
    if decoding_work_mem:
        options.append(f"-c logical_decoding_work_mem={decoding_work_mem}")
    extra = {"options": " ".join(options)} if options else {}
    try:
        return open_connection(dsn, what, error, connection_factory=psycopg2.extras.LogicalReplicationConnection,
                               **extra)
    except psycopg2.OperationalError as exc:
        raise error(f"cannot open a replication connection for {what}: {str(exc).strip()}") from exc


def create_slot(repl, slot: str, export: bool, temporary: bool = False, plugin: str = PLUGIN) -> tuple[Lsn, str | None]:
    """Create slot on the replication connection repl: (consistent point, exported snapshot
    name or None). The snapshot stays importable until repl runs its next command or closes.
    On PostgreSQL 17+ a permanent slot is a failover slot (:func:`create_slot_command`).

    Raises RelayError when the server refuses (the plugin not installed or not allowed).
    """
    try:
        with repl.cursor() as cur:
            cur.execute(create_slot_command(slot, plugin, export, temporary, repl.server_version))
            _name, consistent, snapshot, _plugin = cur.fetchone()
    except psycopg2.Error as exc:
        hint = ""
        if plugin in str(exc):  # not installed, or not allowed by output_plugin_libraries
            hint = f" (is {plugin} installed and in the server's output_plugin_libraries?)"
        raise RelayError(f"cannot create replication slot {slot} with output plugin {plugin}: "
                         f"{str(exc).strip()}{hint}") from exc
    log.info("created replication slot %s at %s", slot, consistent)
    return Lsn.parse(consistent), snapshot


def create_slot_command(slot: str, plugin: str, export: bool, temporary: bool, server_version: int) -> str:
    """The replication command creating slot. server_version: server_version_num (170005).

    From PostgreSQL 17 a permanent slot is created with FAILOVER: a standby with
    sync_replication_slots = on keeps a copy of it that a promoted standby continues
    (a temporary slot cannot fail over). Below 17, the form every server since 10 knows.
    """
    kind = ("TEMPORARY " if temporary else "") + f"LOGICAL {plugin}"
    if server_version >= FAILOVER_VERSION and not temporary:
        mode = "'export'" if export else "'nothing'"
        return f'CREATE_REPLICATION_SLOT "{slot}" {kind} (SNAPSHOT {mode}, FAILOVER)'
    return f'CREATE_REPLICATION_SLOT "{slot}" {kind} {"EXPORT_SNAPSHOT" if export else "NOEXPORT_SNAPSHOT"}'


def export(dsn: str, error: type[PgshovelError], slot: str | None = None, plugin: str = PLUGIN) -> ExportedSnapshot:
    """Create a slot with an exported snapshot for a copy; its handoff is the slot's consistent
    point: a transaction committed before it is in the copy, one committed at or after it is
    streamed by the slot. slot: the set's slot (created for good: the relay's first start), or
    None for a TEMPORARY slot that goes with the snapshot (a bootstrap). plugin: the set's
    decoder (pgoutput: rows are read as text, :func:`encode_row`). Raises error.
    """
    temporary = slot is None
    name = slot or f"pgshovel2_boot_{uuid.uuid4().hex[:12]}"
    repl = replication_connection(dsn, f"slot {name}", error)
    try:
        lsn, snapshot_id = create_slot(repl, name, export=True, temporary=temporary, plugin=plugin)
    except BaseException:
        repl.close()
        raise
    record = {"backend": NAME, "lsn": str(lsn), "slot": name}
    return ExportedSnapshot(dsn, encode_row(plugin), error, snapshot_id, ConsistentPoint(lsn), record, holder=repl)


def encode_row(plugin: str) -> str | None:
    """The SQL function giving rows in capture form with plugin; None with pgoutput (the reader
    reads output text and converts it: pgshovel2.backends.snapshot)."""
    return ENCODE_ROW if plugin == PLUGIN else None


# pg_replication_slots directly (the extension's slot_lag view is not on stock servers)
_SLOT_LAG_SQL = """
SELECT CASE WHEN r.pid IS NULL THEN NULL ELSE coalesce(extract(epoch FROM r.flush_lag), 0)::float8 END,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::int8,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::int8, s.wal_status, s.active,
       to_jsonb(s) ->> 'inactive_since', s.safe_wal_size
FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = %s
"""


def slot_lag(dsn: str, slot: str) -> dict[str, Any]:
    """{lag_seconds, lag_bytes, retained_bytes, wal_status, active, inactive_since, safe_wal_size} of a
    set's slot, or {error} when the database does not answer or the slot does not exist (for ``set
    status``). lag_seconds: the walsender's flush lag, None without a relay streaming; inactive_since:
    PostgreSQL 17's pg_replication_slots.inactive_since (text), None before 17 or while active;
    safe_wal_size: bytes of WAL that may still be written before the slot is invalidated
    (max_slot_wal_keep_size), None without a limit."""
    row = one_row(dsn, _SLOT_LAG_SQL, (slot,), ("lag_seconds", "lag_bytes", "retained_bytes", "wal_status",
                                                "active", "inactive_since", "safe_wal_size"))
    return row or {"error": f"no replication slot {slot} (the relay creates it on its first start)"}


def missing_slot_message(slot: str) -> str:
    """What to do when a set's slot is gone but Kafka holds a position of it."""
    return (f"replication slot {slot} does not exist, but Kafka holds a position of it: it was dropped, or "
            "lost in a failover (PostgreSQL 15 does not copy slots to standbys). The relay will not guess "
            "where to resume. Re-bootstrap the set: run the relay once with --snapshot (it creates the slot "
            "and takes a new initial snapshot, op=r messages, then streams from the new slot)")


def wait_caught_up(dsn: str, slot: str, timeout: float = 120.0) -> Lsn:
    """Wait until the relay of slot has confirmed everything committed before the call.

    Emits a heartbeat and waits until the slot's confirmed_flush_lsn reaches it (the
    relay confirms a heartbeat only once everything before it is in Kafka). Returns the
    heartbeat's LSN; raises RelayError after timeout seconds. Not valid while a relay
    re-creates the slot (a new slot starts past the heartbeat before its snapshot is in
    Kafka): pgshovel2.ops.status.wait_caught_up reads the relay's position in Kafka instead.
    """
    conn = connect(dsn, f"slot {slot}", RelayError)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            target = emit_heartbeat(cur, slot)
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                            "WHERE slot_name = %s", (str(target), slot))
                row = cur.fetchone()
                if row and row[0]:
                    return target
                if time.monotonic() > deadline:
                    raise RelayError(f"slot {slot} did not confirm {target} within {timeout:g}s: "
                                     "is the relay running?")
                time.sleep(0.05)
    finally:
        conn.close()


def emit_heartbeat(cur, slot: str) -> Lsn:
    """Write a heartbeat message for slot into the WAL (non-transactional); returns its LSN.
    The plugin turns it into a heartbeat record: everything before it was sent."""
    cur.execute("SELECT pg_logical_emit_message(false, 'pgshovel2.heartbeat', %s)::text", (slot,))
    return Lsn.parse(cur.fetchone()[0])
