"""The ``logical`` backend: what a set needs in the database, checked and installed.

A logical set reads the WAL through our output plugin ``pgshovel2_decoder``
(sql/decoder) from one replication slot per set. ``set create`` checks the
server can decode for it (wal_level, the plugin allowed and installed), that
each table logs in its WAL what the relay needs (replica identity, below),
and creates the ``pgshovel2_decoder`` extension. The slot itself is created by
the relay's first start (it must export the snapshot of its consistent point
for the initial copy); ``set drop`` drops it.

Replica identity rules (``ALTER TABLE ... REPLICA IDENTITY``): a keyed table's
key columns must be in what the WAL logs for an UPDATE/DELETE's old row (its
primary key with DEFAULT, the index with USING INDEX, every column with FULL);
NOTHING is refused. A table with a TOASTable captured column (a varlena type
whose storage is not PLAIN) needs FULL: an UPDATE that does not change a
TOASTed value does not log it, and only FULL logs the old row with its
values inline, from which the plugin takes it (it never writes a wrong
value; without FULL it stops with an error). The ``debezium`` envelope needs
FULL (it carries every UPDATE's before-image).

Functions taking a cursor run in the caller's transaction and never commit.
"""

import hashlib
import logging

from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.config import SetConfig
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ConfigError

log = logging.getLogger(__name__)

PLUGIN = "pgshovel2_decoder"
EXTENSION = "pgshovel2_decoder"

_IDENTITY_SQL = """
SELECT c.relreplident,
       ARRAY(SELECT a.attname::text FROM pg_index i JOIN pg_attribute a
             ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
             WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'i' THEN i.indisreplident
                                                              ELSE i.indisprimary END),
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attlen = -1 AND a.attstorage <> 'p' AND a.attname = ANY(%(columns)s)
             ORDER BY a.attnum)
FROM pg_class c WHERE c.oid = %(table)s::regclass
"""


def slot_name(cluster: str, set_name: str) -> str:
    """Replication slot of a set: ``pgshovel2_<set, lower case>_<hash of cluster and set>``
    (slot names allow only ``[a-z0-9_]``, at most 63 bytes; the hash keeps sets whose
    names differ only in case, and clusters, apart)."""
    digest = hashlib.sha1(f"{cluster}/{set_name}".encode()).hexdigest()[:8]
    return f"pgshovel2_{set_name.lower()}_{digest}"


def check_server(cur) -> None:
    """Raise CaptureError unless the server can decode with our plugin: wal_level logical,
    the plugin allowed by Debian's ``output_plugin_libraries`` (when the server has that
    setting) and the pgshovel2_decoder extension installed on the server."""
    cur.execute("SELECT current_setting('wal_level'), current_setting('output_plugin_libraries', true)")
    wal_level, allowed = cur.fetchone()
    if wal_level != "logical":
        raise CaptureError(f"the database server has wal_level = {wal_level}: the logical backend needs "
                           "wal_level = logical in postgresql.conf (a restart is needed)")
    if allowed is not None and PLUGIN not in [p.strip() for p in allowed.split(",")]:
        raise CaptureError(f"output plugin {PLUGIN} is not in the server's output_plugin_libraries "
                           f"({allowed!r}): add it in postgresql.conf and reload (scripts/stack.sh does)")
    cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (EXTENSION,))
    if cur.fetchone() is None:
        raise CaptureError(f"the {EXTENSION} extension is not installed on the database server: build and "
                           "install sql/decoder (scripts/install.sh)")


def check_tables(cur, config: SetConfig, tables: tuple[Table, ...], source: str) -> None:
    """Raise ConfigError naming the table (``tables[i]``) when its replica identity does not
    log what the relay needs (module docstring)."""
    for i, table in enumerate(tables):
        cur.execute(_IDENTITY_SQL, {"table": table.qualified, "columns": [c.name for c in table.columns]})
        ident, ident_cols, toastable = cur.fetchone()
        problem = _identity_problem(table, config, ident, set(ident_cols), toastable)
        if problem:
            raise ConfigError(source, f"tables[{i}]", table.qualified,
                              f"{problem}: run ALTER TABLE {table.qualified} REPLICA IDENTITY FULL "
                              "(or use backend: trigger)")


def _identity_problem(table: Table, config: SetConfig, ident: str, ident_cols: set[str],
                      toastable: list[str]) -> str | None:
    if ident == "f":
        return None
    kind = {"d": "DEFAULT", "i": "USING INDEX", "n": "NOTHING"}[ident]
    if ident == "n":
        ident_cols = set()
    if config.envelope == "debezium":
        return f"the debezium envelope needs every old row in the WAL, but its replica identity is {kind}"
    if toastable:
        cols = ", ".join(names.quote_ident(c) for c in toastable)
        return (f"TOASTable captured column(s) {cols} need replica identity FULL (an UPDATE that leaves a "
                f"TOASTed value unchanged does not log it otherwise); it is {kind}")
    if table.key and not set(table.key) <= ident_cols:
        return (f"its key ({', '.join(table.key)}) is not in what the WAL logs of an UPDATE's or DELETE's "
                f"old row (replica identity {kind}: {', '.join(sorted(ident_cols)) or 'nothing'})")
    return None


def install(cur, slot: str) -> None:
    """Create the pgshovel2_decoder extension; raise CaptureError when slot already exists
    (a set of this name was not dropped cleanly). The slot is created by the relay."""
    check_server(cur)
    cur.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(EXTENSION)))
    cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if cur.fetchone() is not None:
        raise CaptureError(f"replication slot {slot!r} already exists: a set of this name was not dropped "
                           f"cleanly; drop it with SELECT pg_drop_replication_slot('{slot}')")


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
