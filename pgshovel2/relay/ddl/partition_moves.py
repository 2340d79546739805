"""Partitions that joined or left a set's partitioned table, on a server without the pgshovel2
extension's event triggers (stock servers: event triggers need a superuser).

There ATTACH and DETACH PARTITION happen without anything of pgshovel2 running in their
transaction, so the relay (:class:`pgshovel2.relay.ddl.partition_watch.PartitionWatch`, every few
seconds) finds them afterwards, by comparing each partitioned table's leaf partitions with those
it saw last (kept in ZooKeeper, relay record ``partitions``, so a restarted relay compares with
what its predecessor saw):

- a partition that left (DETACH) and still carries the set's ``B_tp`` trigger: its rows as they
  are now are relayed as deletes of the table (the set's ``emit_rows``/``emit_messages``, in a
  transaction of the relay's that also drops the trigger), seconds after the DETACH: changes made
  to the detached table meanwhile are not reflected;
- a partition that is gone (DROP TABLE of it, or DETACH and DROP before the relay looked): its
  rows were not relayed as deletes;
- a partition that joined holding rows (ATTACH of a filled table; or created and written in the
  seconds before the relay looked): if attached so, its rows were not relayed as creates
  (``pgshovel set snapshot`` relays them).

Each case is a warning in the log and an entry of the relay record's ``unrelayed`` list, which
``pgshovel set status`` shows (:func:`lines`). Nothing here raises: a database outage is the
stream's to report.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from psycopg2 import sql

from pgshovel2.backends import partitions, trigger_drop
from pgshovel2.catalog import Table

log = logging.getLogger(__name__)

KEEP = 50  # entries of the unrelayed list kept (the newest)
_EMIT = {"pgshovel2.truncate_partition": "pgshovel2.emit_rows",
         "pgshovel2_pl.truncate_partition": "pgshovel2_pl.emit_rows",
         "pgshovel2_pl.truncate_message": "pgshovel2_pl.emit_messages"}

_EVENT_TRIGGER_SQL = "SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'pgshovel2_partitions' " \
                     "AND evtenabled <> 'D')"
_LEAVES_SQL = """
SELECT p.relid::oid, p.relid::regclass::text FROM pg_partition_tree(to_regclass(%s)) p
JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf AND p.level > 0 AND c.relkind = 'r'
"""
# Tables with the trigger B_tp (name) that root is not an ancestor of: (OID, name, the trigger's arguments).
_DETACHED_SQL = """
SELECT t.tgrelid::oid, t.tgrelid::regclass::text, t.tgargs FROM pg_trigger t
WHERE t.tgname = %(name)s AND t.tgparentid = 0
  AND NOT EXISTS (SELECT 1 FROM pg_partition_ancestors(t.tgrelid) a
                  WHERE a.relid::oid = %(root)s AND a.relid::oid <> t.tgrelid)
"""


class PartitionMoves:
    """Finds partitions that joined or left the set's partitioned tables (module docstring).
    load(): the relay record ``partitions`` (None: none yet); save(record): writes it."""

    def __init__(self, load: Callable[[], dict | None], save: Callable[[dict], None]):
        self._load, self._save = load, save
        self._record: dict[str, Any] | None = None

    def check(self, cur, triggers: partitions.TruncateTriggers, tables: tuple[Table, ...]) -> None:
        """Compare the leaf partitions of tables (the set's partitioned ones) with those seen last;
        relay detached partitions' rows, record what could not be relayed. cur: autocommit."""
        cur.execute(_EVENT_TRIGGER_SQL)
        if cur.fetchone()[0]:
            return  # the extension's event triggers relay every move in its own transaction
        if self._record is None:
            self._record = self._load() or {"known": {}, "unrelayed": []}
        known, changed = self._record.setdefault("known", {}), False
        for table in tables:
            cur.execute(_LEAVES_SQL, (table.qualified,))
            now = {str(oid): name for oid, name in cur.fetchall()}
            before = known.get(table.qualified)
            changed |= self._detached(cur, triggers, table)
            if before is not None:
                changed |= self._gone(cur, table, before, now)
                changed |= self._joined(cur, table, before, now)
            if before is None:
                log.info("%d partition(s) of set table %s watched for ATTACH and DETACH (no event triggers on this "
                         "server)", len(now), table.qualified)
            if before != now:
                known[table.qualified], changed = now, True
        if changed:
            self._save(self._record)

    def _detached(self, cur, triggers: partitions.TruncateTriggers, table: Table) -> bool:
        """Relay the rows of each partition of table that was detached and still has B_tp, as
        deletes of table, and drop its B_tp (one transaction each)."""
        root = partitions.table_oid(cur, table)
        cur.execute(_DETACHED_SQL, {"name": triggers.leaf_name, "root": root})
        found = [(oid, name) for oid, name, args in cur.fetchall()
                 if bytes(args).split(b"\0")[-2:-1] == [b"%d" % root]]
        for oid, name in found:
            emit = sql.SQL(_EMIT[triggers.leaf])
            args = sql.SQL(", ").join(sql.Literal(a) for a in (*triggers.args, root, oid, "D"))
            cur.execute("BEGIN")
            try:
                cur.execute(sql.SQL("SELECT {}({})").format(emit, args))
                rows = cur.fetchone()[0]
                trigger_drop.drop_trigger(cur, triggers.leaf_name, name)
                cur.execute("COMMIT")
            except Exception:
                cur.execute("ROLLBACK")
                raise
            self._note(table, name, f"detached; its {rows} row(s) were relayed as deletes when the relay found it, "
                                    "not at the DETACH: changes to it in between are not reflected", warn=rows > 0)
        return bool(found)

    def _gone(self, cur, table: Table, before: dict[str, str], now: dict[str, str]) -> bool:
        """Note each partition of table seen last that no longer exists."""
        gone = []
        for oid, name in before.items():
            if oid in now:
                continue
            cur.execute("SELECT 1 FROM pg_class WHERE oid = %s::oid", (oid,))
            if cur.fetchone() is None:
                gone.append(name)
        for name in gone:
            self._note(table, name, "dropped while a partition (or detached and dropped before the relay looked): "
                                    "its rows were NOT relayed as deletes")
        return bool(gone)

    def _joined(self, cur, table: Table, before: dict[str, str], now: dict[str, str]) -> bool:
        """Note each partition of table not seen last that holds rows."""
        noted = False
        for oid, name in now.items():
            if oid in before:
                continue
            cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM ONLY {})").format(sql.SQL(name)))
            if cur.fetchone()[0]:
                self._note(table, name, "joined holding rows: if it was ATTACHed with them, they were NOT relayed "
                                        f"as creates (relay them with: pgshovel set snapshot <set> --table "
                                        f"{table.qualified})")
                noted = True
        return noted

    def _note(self, table: Table, partition: str, what: str, warn: bool = True) -> None:
        entry = {"at": time.time(), "table": table.qualified, "partition": partition, "what": what}
        unrelayed = self._record.setdefault("unrelayed", [])
        unrelayed.append(entry)
        del unrelayed[:-KEEP]
        (log.warning if warn else log.info)("partition %s of set table %s %s (no event triggers on this server: "
                                            "docs/wire.rst, partitioned tables)", partition, table.qualified, what)


def lines(record: dict | None) -> list[str]:
    """``set status`` lines of the relay record ``partitions``: its unrelayed entries."""
    out = []
    for entry in (record or {}).get("unrelayed", []):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry["at"]))
        out.append(f"  partition {entry['partition']} of {entry['table']} ({when}): {entry['what']}")
    return out
