"""What ``set create`` and ``set upgrade`` refuse about partitions: the same rows captured twice.

A set naming a partitioned table captures every partition of it (:mod:`.partitions`). So a set
may not name a table and one of its partitions (any depth): the partition's changes would be
the table's too, in two topics. Nor may it name a partition of a table another set captures, or
a partitioned table of which another set captures a partition: the partition's rows would
reach two sets' topics under two table names. Another set's capture is found in the database,
whatever cluster it belongs to: its non-cloned triggers named ``pgshovel2_<set>_<hash>...`` (a
trigger set's capture triggers; any set's TRUNCATE triggers of a partitioned table, ``_tb``),
or a publication ``pgshovel2_...`` (a pgoutput set). A logical set of our plugin leaves no trace
on a table that is not partitioned (its tables are a slot option): such a set capturing a
partition is not seen when a set names the partition's table afterwards.
"""

from pgshovel2 import names
from pgshovel2.catalog import Table, raise_all
from pgshovel2.errors import ConfigError

# Sets other than the one being checked (own: its trigger base name and its publication) that
# capture relation %(rel)s: "trigger <name>" or "publication <name>".
_CAPTURED_BY_SQL = r"""
SELECT 'trigger ' || t.tgname FROM pg_trigger t
WHERE t.tgrelid = %(rel)s AND t.tgparentid = 0 AND t.tgname LIKE 'pgshovel2\_%%' AND t.tgname NOT LIKE '%%\_tp'
  AND t.tgname <> ALL (%(own)s)
UNION ALL
SELECT 'publication ' || p.pubname FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid
WHERE r.prrelid = %(rel)s AND p.pubname LIKE 'pgshovel2\_%%' AND p.pubname <> %(publication)s
ORDER BY 1
"""

_ANCESTORS_SQL = """
SELECT a.relid::oid, n.nspname, c.relname FROM pg_partition_ancestors(to_regclass(%s)) WITH ORDINALITY a(relid, depth)
JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE a.depth > 1 ORDER BY a.depth
"""

_DESCENDANTS_SQL = """
SELECT p.relid::oid, n.nspname, c.relname FROM pg_partition_tree(to_regclass(%s)) p
JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.level > 0 ORDER BY p.level, 3
"""


def check(cur, tables: tuple[Table, ...], own: str, publication: str, source: str) -> None:
    """Raise ConfigError naming every table (``tables[i]``) of a set that overlaps another table of
    it or another set's tables (module docstring), all in one error. own: the set's trigger base
    name (pgshovel2.backends.partitions.base_name), publication: its publication's name (a
    pgoutput set's; else anything no publication has)."""
    index = {t.qualified: i for i, t in enumerate(tables)}
    problems = []
    for i, table in enumerate(tables):
        cur.execute(_ANCESTORS_SQL, (table.qualified,))
        for oid, schema, name in cur.fetchall():
            other = names.qualified(schema, name)
            if other in index:
                problems.append(ConfigError(source, f"tables[{i}]", table.qualified,
                                            f"table {table.qualified} is a partition of {other} "
                                            f"(tables[{index[other]}]), whose changes include its own: they would "
                                            f"reach two topics; name only {other}"))
                continue
            problems += _captured(cur, oid, own, publication, source, i, table,
                                  f"it is a partition of {other}, which")
        cur.execute(_DESCENDANTS_SQL, (table.qualified,))
        for oid, schema, name in cur.fetchall():
            if names.qualified(schema, name) not in index:
                problems += _captured(cur, oid, own, publication, source, i, table,
                                      f"its partition {names.qualified(schema, name)}")
    raise_all(problems, source)


def _captured(cur, oid: int, own: str, publication: str, source: str, i: int, table: Table,
              what: str) -> list[ConfigError]:
    owns = [own + suffix for suffix in ("", "_t", "_tb", "_ta")]
    cur.execute(_CAPTURED_BY_SQL, {"rel": oid, "own": owns, "publication": publication})
    found = [row[0] for row in cur.fetchall()]
    if not found:
        return []
    return [ConfigError(source, f"tables[{i}]", table.qualified,
                        f"{what} is captured by another set ({', '.join(found)}): the partition's rows would "
                        "reach two sets' topics; capture the partitioned table in one set only")]
