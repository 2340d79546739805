"""Partitioned tables of a set: the statement triggers that capture a TRUNCATE of a partition.

A set names a partitioned table T; its changes in any partition are T's (the capture triggers on
T are cloned onto every partition by PostgreSQL; the logical decoders map a partition to T).
A TRUNCATE of one partition is logged as nothing a stream could turn into rows, so each set
has, named after its trigger name B (:func:`base_name`):

- ``B_tb`` BEFORE TRUNCATE and ``B_ta`` AFTER TRUNCATE on T (``truncate_root``): while T itself
  is truncated (its own TRUNCATE event) the partitions' triggers do nothing;
- ``B_tp`` BEFORE TRUNCATE on every leaf partition of T, any depth (arguments: the set's, then
  T's OID): the partition's rows as the DELETEs of T they are -- D events in a trigger set's
  queue (``truncate_partition``: ``emit_rows``), logical messages for a logical set
  (``pgshovel2_pl.truncate_message``: ``emit_messages``).

The functions are in the C extension (schema pgshovel2, version 0.3, sql/capture) for sets with C
capture, else in pgshovel2_pl (sql/capture_pl, installable by a non-superuser). ``B_tb`` carries
the leaf function and its arguments, so whoever adds ``B_tp`` to a new partition (the C
extension's event trigger at CREATE TABLE ... PARTITION OF / ATTACH PARTITION; elsewhere the
relay, :func:`add_missing`) needs nothing else. Functions taking a cursor run in the caller's
transaction and never commit.
"""

from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

from pgshovel2.backends import plcapture, trigger_drop
from pgshovel2.catalog import Table
from pgshovel2.db import connect
from pgshovel2.errors import UnavailableError
from pgshovel2.setrecord import PGOUTPUT, SetRecord, SlotCapture, TriggerCapture, trigger_name

ROOT_BEFORE, ROOT_AFTER, LEAF = "_tb", "_ta", "_tp"

_OID_SQL = "SELECT to_regclass(%s)::oid"

# Leaf partitions of a table (any depth; foreign tables have no TRUNCATE to capture) without a trigger named %(name)s.
_MISSING_SQL = """
SELECT p.relid::oid, p.relid::regclass::text FROM pg_partition_tree(to_regclass(%(table)s)) p
JOIN pg_class c ON c.oid = p.relid
WHERE p.isleaf AND c.relkind = 'r'
  AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = p.relid AND t.tgname = %(name)s)
ORDER BY p.level, 2
"""


@dataclass(frozen=True)
class TruncateTriggers:
    """A set's TRUNCATE triggers of partitioned tables: base, the set's trigger name B; root: the
    function of ``B_tb``/``B_ta``; leaf: the function of ``B_tp``, with args."""

    base: str
    root: str
    leaf: str
    args: tuple[str, ...]

    @property
    def leaf_name(self) -> str:
        """``B_tp``: the name of the leaf partitions' triggers."""
        return self.base + LEAF

    def leaf_statement(self, leaf: str, root: int) -> sql.Composed:
        """CREATE TRIGGER B_tp on leaf (a regclass text, quoted as needed) of the set's table of OID root."""
        return sql.SQL("CREATE TRIGGER {} BEFORE TRUNCATE ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}({})").format(
            sql.Identifier(self.leaf_name), sql.SQL(leaf), sql.SQL(self.leaf),
            sql.SQL(", ").join(sql.Literal(a) for a in (*self.args, str(root))))


def base_name(record: SetRecord) -> str:
    """The set's trigger name: a trigger set's capture trigger name; for a logical set the name a
    trigger set of that name would have (setrecord.trigger_name)."""
    if isinstance(record.capture, TriggerCapture):
        return record.capture.trigger
    return trigger_name(record.cluster, record.name)


def for_trigger(capture: TriggerCapture) -> TruncateTriggers:
    """The TruncateTriggers of a trigger set (module docstring)."""
    schema = capture.schema
    return TruncateTriggers(capture.trigger, f"{schema}.truncate_root", f"{schema}.truncate_partition",
                            (capture.queue,))


def for_record(record: SetRecord) -> TruncateTriggers:
    """The TruncateTriggers of a set (module docstring)."""
    capture = record.capture
    if isinstance(capture, SlotCapture):
        decoder = "pgoutput" if capture.plugin == PGOUTPUT else "pgshovel2"
        return TruncateTriggers(base_name(record), "pgshovel2_pl.truncate_root", "pgshovel2_pl.truncate_message",
                                (capture.slot, decoder))
    return for_trigger(capture)


def install_logical(cur, record: SetRecord, tables: tuple[Table, ...]) -> list[str]:
    """:func:`install` for a logical set's tables, pgshovel2_pl installed first when one of them
    is partitioned; returns the leaves given ``B_tp``."""
    if not partitioned(cur, tables):
        return []
    plcapture.ensure(cur)
    return install(cur, for_record(record), tables)


def publication(record: SetRecord) -> str:
    """The set's publication (a pgoutput set's: SetRecord.publication), else ``""`` (none)."""
    return record.publication or ""


def partitioned(cur, tables: tuple[Table, ...]) -> tuple[Table, ...]:
    """The partitioned tables among tables (those that exist), in one query."""
    if not tables:
        return ()
    cur.execute("SELECT t FROM unnest(%s::text[]) t WHERE (SELECT relkind FROM pg_class "
                "WHERE oid = to_regclass(t)) = 'p'", ([t.qualified for t in tables],))
    found = {t for (t,) in cur.fetchall()}
    return tuple(t for t in tables if t.qualified in found)


def root_statement(triggers: TruncateTriggers, table: Table, suffix: str) -> sql.Composed:
    """CREATE TRIGGER ``B_tb`` (suffix ROOT_BEFORE) or ``B_ta`` (ROOT_AFTER) on table."""
    when = "BEFORE" if suffix == ROOT_BEFORE else "AFTER"
    args = sql.SQL(", ").join(sql.Literal(a) for a in (triggers.leaf, *triggers.args))
    return sql.SQL("CREATE TRIGGER {} {} TRUNCATE ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}({})").format(
        sql.Identifier(triggers.base + suffix), sql.SQL(when), sql.Identifier(table.schema, table.name),
        sql.SQL(triggers.root), args)


def install(cur, triggers: TruncateTriggers, tables: tuple[Table, ...]) -> list[str]:
    """Create the TRUNCATE triggers of the partitioned tables among tables (module docstring) and
    ``B_tp`` on each of their leaf partitions; returns the leaves given ``B_tp``. The trigger
    functions must be installed (pgshovel2 0.3 or pgshovel2_pl)."""
    leaves = []
    for table in partitioned(cur, tables):
        for suffix in (ROOT_BEFORE, ROOT_AFTER):
            cur.execute(root_statement(triggers, table, suffix))
        leaves += add_missing(cur, triggers, table)
    return leaves


def missing_root(cur, triggers: TruncateTriggers, table: Table) -> list[str]:
    """The suffixes (ROOT_BEFORE, ROOT_AFTER) of the triggers partitioned table lacks."""
    cur.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s)", (table.qualified,))
    have = {name for (name,) in cur.fetchall()}
    return [suffix for suffix in (ROOT_BEFORE, ROOT_AFTER) if triggers.base + suffix not in have]


def missing(cur, triggers: TruncateTriggers, table: Table) -> list[tuple[int, str]]:
    """(OID, name) of the leaf partitions of table without ``B_tp``."""
    cur.execute(_MISSING_SQL, {"table": table.qualified, "name": triggers.leaf_name})
    return [(oid, name) for oid, name in cur.fetchall()]


def add_missing(cur, triggers: TruncateTriggers, table: Table) -> list[str]:
    """Create ``B_tp`` on every leaf partition of table lacking it; returns their names. Raises
    psycopg2 errors (e.g. no TRIGGER privilege on a partition) for the caller to report."""
    added = []
    for _oid, leaf in missing(cur, triggers, table):
        cur.execute(triggers.leaf_statement(leaf, table_oid(cur, table)))
        added.append(leaf)
    return added


def table_oid(cur, table: Table) -> int:
    """The OID of table (which must exist)."""
    cur.execute(_OID_SQL, (table.qualified,))
    return cur.fetchone()[0]


def uninstall(cur, triggers: TruncateTriggers, tables: tuple[Table, ...], everywhere: bool = False) -> list[str]:
    """Drop the set's TRUNCATE triggers from tables (those that still exist) and ``B_tp`` from their
    partitions; everywhere: from every table that has it (partitions detached since included: the
    set is dropped). Returns where they were."""
    done, leaves = [], []
    for table in tables:
        cur.execute("SELECT to_regclass(%s)", (table.qualified,))
        if cur.fetchone()[0] is None:
            continue
        cur.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname = ANY(%s)",
                    (table.qualified, [triggers.base + ROOT_BEFORE, triggers.base + ROOT_AFTER]))
        for (name,) in cur.fetchall():
            trigger_drop.drop_trigger(cur, name, table.qualified)
            done.append(f"trigger {name} on {table.qualified}")
        cur.execute("SELECT p.relid::regclass::text FROM pg_partition_tree(%s::regclass) p JOIN pg_trigger t "
                    "ON t.tgrelid = p.relid AND t.tgname = %s ORDER BY 1", (table.qualified, triggers.leaf_name))
        leaves += [leaf for (leaf,) in cur.fetchall()]
    if everywhere:
        cur.execute("SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = %s ORDER BY 1",
                    (triggers.leaf_name,))
        leaves = [leaf for (leaf,) in cur.fetchall()]
    for leaf in leaves:
        trigger_drop.drop_trigger(cur, triggers.leaf_name, leaf)
        done.append(f"trigger {triggers.leaf_name} on {leaf}")
    return done


def lacking(record: SetRecord) -> dict:
    """{missing: [the tables and partitions of the set lacking their TRUNCATE trigger]}, or {error}
    when the database does not answer (for ``set status``)."""
    triggers = for_record(record)
    try:
        conn = connect(record.dsn, f"set {record.name!r}", UnavailableError)
    except UnavailableError as exc:
        return {"error": str(exc), "missing": []}
    try:
        with conn.cursor() as cur:
            out = []
            for table in partitioned(cur, record.tables):
                out += [f"table {table.qualified} ({triggers.base + suffix})"
                        for suffix in missing_root(cur, triggers, table)]
                out += [f"partition {leaf} of {table.qualified}" for _oid, leaf in missing(cur, triggers, table)]
            return {"missing": out}
    except psycopg2.Error as exc:
        return {"error": str(exc).strip(), "missing": []}
    finally:
        conn.close()
