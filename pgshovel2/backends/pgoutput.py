"""A logical set read through PostgreSQL's own ``pgoutput`` plugin (stock servers: RDS, Cloud SQL).

What our plugin does in C is done here from the catalog and in the relay: a publication per set
(:func:`publication_name`, created by ``set create`` in its transaction, dropped by ``set drop``)
names what the slot sends; values arrive as output-function text in a session whose settings
are pinned (:data:`pgshovel2.codec.textforms.SESSION_SETTINGS`, :func:`libpq_options`) and
:func:`column_converters` turns them into the capture forms. Column lists (PG 15+) are used
only for tables whose replica identity is not FULL: PostgreSQL refuses UPDATE/DELETE on a
table whose published column list does not cover its replica identity, and FULL covers every
column. Elsewhere whole rows are published and the relay keeps the set's columns.
"""

from collections.abc import Callable
from typing import Any

from psycopg2 import sql

from pgshovel2.catalog import Table
from pgshovel2.codec.textforms import SESSION_SETTINGS, WALSENDER_SETTINGS, converter
from pgshovel2.errors import CaptureError

NAME = "pgoutput"
GENERATED_VERSION = 180000  # server_version_num from which a publication can send stored generated columns

_TYPES_SQL = """
WITH RECURSIVE d(attnum, atttypid, typ) AS (
    SELECT a.attnum, a.atttypid, a.atttypid FROM pg_attribute a
    WHERE a.attrelid = %(table)s::regclass AND a.attnum = ANY(%(attnums)s::int2[])
  UNION ALL
    SELECT d.attnum, d.atttypid, t.typbasetype FROM d JOIN pg_type t ON t.oid = d.typ WHERE t.typtype = 'd')
SELECT d.attnum, d.atttypid::int8, d.typ::int8,
       CASE WHEN t.typsubscript = 'array_subscript_handler'::regproc THEN t.typelem::int8 ELSE 0 END
FROM d JOIN pg_type t ON t.oid = d.typ WHERE t.typtype <> 'd'
"""


def publication_name(slot: str) -> str:
    """The publication of a set: named as its slot (``[a-z0-9_]``, at most 63 bytes)."""
    return slot


def libpq_options() -> str:
    """libpq ``options`` pinning the settings output text depends on (``-c name=value ...``)."""
    return " ".join(f"-c {k}={v}" for k, v in WALSENDER_SETTINGS.items())


def pin_settings(cur, search_path: bool = False) -> None:
    """SET the pinned settings in cur's session (the snapshot reader); search_path: pin it too (as
    the walsender's, :data:`~pgshovel2.codec.textforms.WALSENDER_SETTINGS`: only in a session whose
    queries name every object qualified)."""
    for name, value in (WALSENDER_SETTINGS if search_path else SESSION_SETTINGS).items():
        cur.execute(sql.SQL("SET {} = %s").format(sql.Identifier(name)), (value,))


class ColumnTypes:
    """The types of a table's captured columns, from the catalog.

    type_oids: attnum -> the column's type OID (pg_attribute.atttypid: a domain's own OID),
    as a Relation message carries it. converters: text -> capture form, in table.columns order.
    oids: every type and base type OID of the columns (for a reader that must get them as text).
    """

    def __init__(self, rows: list[tuple[int, int, int, int]], table: Table):
        by_attnum = {r[0]: r for r in rows}
        self.type_oids = {r[0]: r[1] for r in rows}
        self.converters: list[Callable[[str], Any]] = [converter(by_attnum[c.attnum][2], by_attnum[c.attnum][3])
                                                       for c in table.columns if c.attnum in by_attnum]
        self.oids = {r[1] for r in rows} | {r[2] for r in rows}
        self.missing = [c.name for c in table.columns if c.attnum not in by_attnum]


def column_types(cur, table: Table) -> ColumnTypes:
    """The ColumnTypes of table's captured columns (missing: columns no longer in the table)."""
    cur.execute(_TYPES_SQL, {"table": table.sql_name, "attnums": [c.attnum for c in table.columns]})
    return ColumnTypes(cur.fetchall(), table)


_RECORD_TYPES_SQL = """
WITH RECURSIVE d(attnum, atttypid, typ) AS (
    SELECT u.attnum, u.t::oid, u.t::oid FROM unnest(%(attnums)s::int2[], %(types)s::regtype[]) u(attnum, t)
  UNION ALL
    SELECT d.attnum, d.atttypid, t.typbasetype FROM d JOIN pg_type t ON t.oid = d.typ WHERE t.typtype = 'd')
SELECT d.attnum, d.atttypid::int8, d.typ::int8,
       CASE WHEN t.typsubscript = 'array_subscript_handler'::regproc THEN t.typelem::int8 ELSE 0 END
FROM d JOIN pg_type t ON t.oid = d.typ WHERE t.typtype <> 'd'
"""


def recorded_column_types(cur, table: Table) -> ColumnTypes:
    """The ColumnTypes of table's captured columns from the types the set record names
    (Column.pg_type, as format_type wrote it), for a table no longer found by its name: dropped,
    with changes of it still to relay before the marker that ends it."""
    cur.execute(_RECORD_TYPES_SQL, {"attnums": [c.attnum for c in table.columns],
                                    "types": [c.pg_type for c in table.columns]})
    return ColumnTypes(cur.fetchall(), table)


def known_column_types(cur, table: Table) -> ColumnTypes:
    """The ColumnTypes of table's captured columns from the catalog, else (the table or a column
    dropped since: changes of the layout in effect may still come) from the record's types."""
    cur.execute("SELECT pg_catalog.to_regclass(%s)", (table.sql_name,))
    types = column_types(cur, table) if cur.fetchone()[0] is not None else None
    return types if types is not None and not types.missing else recorded_column_types(cur, table)


def _replica_identity_full(cur, table: Table) -> bool:
    cur.execute("SELECT relreplident = 'f' FROM pg_class WHERE oid = %s::regclass", (table.sql_name,))
    return cur.fetchone()[0]


def _live_columns(cur, table: Table) -> int:
    cur.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = ''", (table.sql_name,))
    return cur.fetchone()[0]


def _targets(cur, tables: tuple[Table, ...]) -> list[sql.Composable]:
    """The publication's table list: a column list where the module docstring says."""
    cur.execute("SELECT current_setting('server_version_num')::int")
    version = cur.fetchone()[0]
    parts = []
    for table in tables:
        target = sql.Identifier(*table.relation)
        if (version >= 150000 and table.columns and len(table.columns) < _live_columns(cur, table)
                and not _replica_identity_full(cur, table)):
            cols = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
            target = sql.SQL("{} ({})").format(target, cols)
        parts.append(target)
    return parts


def sends_generated(cur) -> bool:
    """Whether a publication on cur's server can send stored generated columns (PostgreSQL 18's
    ``publish_generated_columns``); before 18 pgoutput leaves every generated column out of its
    messages, so a set must not capture them (pgshovel2.catalog.uncarried_generated)."""
    cur.execute("SELECT current_setting('server_version_num')::int")
    return cur.fetchone()[0] >= GENERATED_VERSION


def create_publication(cur, name: str, tables: tuple[Table, ...]) -> str:
    """CREATE PUBLICATION name FOR TABLE the set's tables (column lists: module docstring), with
    publish_via_partition_root, and from PostgreSQL 18 on publish_generated_columns = stored
    (the set captures stored generated columns there); in the caller's transaction. Returns the
    statement's text. Raises psycopg2 errors (e.g. not the tables' owner) for the caller to report."""
    options = "publish_via_partition_root = true"
    if sends_generated(cur):
        options += ", publish_generated_columns = stored"
    statement = sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (" + options + ")").format(
        sql.Identifier(name), sql.SQL(", ").join(_targets(cur, tables)))
    cur.execute(statement)
    return statement.as_string(cur)


def set_publication_tables(cur, name: str, tables: tuple[Table, ...]) -> str:
    """ALTER PUBLICATION name SET TABLE the set's tables (set upgrade), in the caller's transaction.
    Returns the statement's text."""
    statement = sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
        sql.Identifier(name), sql.SQL(", ").join(_targets(cur, tables)))
    cur.execute(statement)
    return statement.as_string(cur)


def drop_publication(cur, name: str) -> None:
    """DROP PUBLICATION IF EXISTS name, in the caller's transaction."""
    cur.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))


def publication_exists(cur, name: str) -> bool:
    """True when the publication exists in the database."""
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    return cur.fetchone() is not None


def check_existing(cur, name: str, tables: tuple[Table, ...]) -> None:
    """Raise CaptureError naming every way publication name (a DBA's, ``publication: {existing: NAME}``)
    would not send the set's changes: missing, not publishing insert/update/delete/truncate, a table
    of the set not in it, a partitioned one without publish_via_partition_root, a column list without
    a captured column, a row filter (it would leave changes out). Nothing is changed."""
    cur.execute("SELECT pubinsert AND pubupdate AND pubdelete AND pubtruncate, pubviaroot FROM pg_publication "
                "WHERE pubname = %s", (name,))
    row = cur.fetchone()
    if row is None:
        raise CaptureError(f"publication {name!r} (publication.existing) does not exist in the set's database: "
                           "its tables' owner creates it (pgshovel set create --print-grants prints the statement)")
    every_action, via_root = row
    problems = [] if every_action else ["it must publish insert, update, delete and truncate"]
    cur.execute("SELECT current_setting('server_version_num')::int >= 150000")
    lists = cur.fetchone()[0]
    cur.execute("SELECT schemaname::text, tablename::text, " + ("attnames::text[], rowfilter IS NOT NULL"
                if lists else "NULL::text[], false") + " FROM pg_publication_tables WHERE pubname = %s", (name,))
    published = {(r[0], r[1]): (r[2], r[3]) for r in cur.fetchall()}
    for table in tables:
        cur.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s::regclass", (table.qualified,))
        if cur.fetchone()[0] and not via_root:
            problems.append(f"table {table.qualified} is partitioned: the publication needs "
                            "publish_via_partition_root = true")
        found = published.get((table.schema, table.name))
        if found is None:
            problems.append(f"table {table.qualified} is not in it (ALTER PUBLICATION ... ADD TABLE)")
            continue
        columns, filtered = found
        if filtered:
            problems.append(f"table {table.qualified} has a row filter (WHERE): changes outside it would be lost")
        if columns is not None and (lacking := [c.name for c in table.columns if c.name not in columns]):
            problems.append(f"table {table.qualified}: its column list lacks {', '.join(lacking)}")
    if problems:
        raise CaptureError(f"publication {name!r} (publication.existing) does not send what the set captures: "
                           + "; ".join(problems))
