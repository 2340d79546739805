"""A logical set's tables as its decoder is told them, and the set-version marker of ``set upgrade``.

Our plugin gets the set's tables as its ``tables`` option (:func:`tables_spec`, format in
sql/decoder/README.rst); pgoutput gets them from the set's publication. ``set upgrade``
switches both exactly at one transaction (:func:`mark_version`): in its own database
transaction it locks the tables it adds, changes or removes against writers, sets the
publication's tables (pgoutput), and writes the transactional logical message
``pgshovel2.version`` ``{"version": N, "tables": <spec>}``. Every change committed before that
transaction is decoded with the old tables, every change after it with the new ones (the locks
keep any writer of those tables from spanning the switch); our plugin takes the new ``tables``
from the message itself, at its place in the stream.
"""

import json

from psycopg2 import sql

from pgshovel2.backends import pgoutput
from pgshovel2.catalog import Table
from pgshovel2.errors import RelayError
from pgshovel2.setrecord import PLUGIN

VERSION_PREFIX = "pgshovel2.version"


def tables_spec(cur, tables: tuple[Table, ...], mode_all: frozenset[str]) -> tuple[str, set[str]]:
    """(our plugin's ``tables`` option ``oid[*]:attnum,...;...`` in set order, the tags of tables
    captured with fewer columns than they have). ``*``: mode all (the plugin follows ADD/DROP
    COLUMN). A table is found by its name, else by its recorded OID (Table.oid: renamed, or dropped
    with changes still to decode before the marker that ends it: the plugin decodes them under the
    catalog of their time). Raises RelayError when a table is found neither way."""
    parts, subset = [], set()
    for table in tables:
        cur.execute("SELECT c.oid, (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid "
                    "AND a.attnum > 0 AND NOT a.attisdropped) FROM pg_class c WHERE c.oid = to_regclass(%s)",
                    (table.sql_name,))
        row = cur.fetchone()
        if row is None and table.oid is not None:
            row = (table.oid, len(table.columns))
        if row is None:
            raise RelayError(f"table {table.qualified} of the set does not exist any more (and the set record "
                             "has no OID of it: a set created before OIDs were recorded)")
        oid, live = row
        if len(table.columns) < live:
            subset.add(table.qualified)
        star = "*" if table.qualified in mode_all else ""
        parts.append(f"{oid}{star}:{','.join(str(c.attnum) for c in table.columns)}")
    return ";".join(parts), subset


def lock_tables(cur, tables: list[Table]) -> None:
    """LOCK the tables against writers until the caller's transaction ends (SHARE ROW EXCLUSIVE:
    waits for running writers, blocks new ones), in a stable order."""
    for table in sorted(tables, key=lambda t: t.qualified):
        cur.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(sql.Identifier(*table.relation)))


def mark_version(cur, slot: str, plugin: str, version: int, tables: tuple[Table, ...],
                 mode_all: frozenset[str], existing: str | None = None) -> str:
    """Switch the set's decoding to tables at this transaction (module docstring): the publication
    (pgoutput: the set's own is set to tables; existing, the DBA's, is only checked to cover them,
    pgoutput.check_existing, raising CaptureError) and the version message. Returns the message written."""
    if plugin != PLUGIN and existing:
        pgoutput.check_existing(cur, existing, tables)
    elif plugin != PLUGIN:
        pgoutput.set_publication_tables(cur, pgoutput.publication_name(slot), tables)
    spec, _ = tables_spec(cur, tables, mode_all)
    message = json.dumps({"version": version, "tables": spec})
    cur.execute("SELECT pg_logical_emit_message(true, %s, %s)", (VERSION_PREFIX, message))
    return message
