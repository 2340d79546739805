"""The relay's watch over the partitions of a set's partitioned tables (pgshovel2.backends.partitions).

A TRUNCATE of a partition reaches Kafka only through the set's ``B_tp`` trigger on it. Servers
with the pgshovel2 extension (0.3) give a partition created or attached later its trigger in the
DDL's own transaction (an event trigger); elsewhere (stock servers: event triggers need a
superuser) the relay does: at its start and then every INTERVAL seconds it looks for leaf
partitions without the trigger (and partitioned tables without their ``B_tb``/``B_ta``) and
creates them, each in a transaction of its own that waits at most LOCK_TIMEOUT for the lock. A
TRUNCATE of a new partition before that is not captured (docs/wire.rst, "Partitioned tables").
When its role may not, it logs a warning naming the partition and the statement a DBA runs, at
most every WARN_INTERVAL seconds a partition; ``pgshovel set status`` lists such partitions
(:func:`pgshovel2.ops.status`). The watch never stops the relay: a database outage is the
stream's to report. Partitions that joined or left the table there are
:mod:`pgshovel2.relay.ddl.partition_moves`'.
"""

import logging
import time

import psycopg2
import psycopg2.errors
from kazoo.exceptions import KazooException
from psycopg2 import sql

from pgshovel2.backends import partitions
from pgshovel2.db import close_quietly, connect
from pgshovel2.errors import ClusterError, UnavailableError
from pgshovel2.relay.ddl.partition_moves import PartitionMoves
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)

INTERVAL = 5.0
WARN_INTERVAL = 600.0
LOCK_TIMEOUT = "2s"


class PartitionWatch:
    """Adds the TRUNCATE triggers a set's partitions lack (module docstring), on a connection of
    its own to dsn, at most every interval seconds (:meth:`check`); moves: finds partitions that
    joined or left where no event trigger relays them (None: not looked for)."""

    def __init__(self, dsn: str, moves: PartitionMoves | None = None, interval: float = INTERVAL):
        self.dsn, self.moves, self.interval = dsn, moves, interval
        self._conn = None
        self._next = 0.0
        self._warned: dict[str, float] = {}  # partition -> when it was last warned about
        self._partitioned: tuple[frozenset[str], tuple] | None = None  # (the set's tags, its partitioned tables)

    def check(self, record: SetRecord) -> list[str]:
        """Once interval has passed since the last check: create what the set's partitioned tables
        lack; returns the triggers created (log lines say so too). Never raises."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.interval
        tags = frozenset(t.qualified for t in record.tables)
        if self._partitioned is not None and self._partitioned[0] == tags and not self._partitioned[1]:
            return []  # none of the set's tables is partitioned (a table cannot become so)
        try:
            return self._check(record)
        except (psycopg2.Error, UnavailableError, ClusterError, KazooException) as exc:
            log.warning("partition watch of set %r: %s", record.name, str(exc).strip())
            self.close()
            return []

    def _check(self, record: SetRecord) -> list[str]:
        if self._conn is None:
            self._conn = connect(self.dsn, f"set {record.name!r}", UnavailableError)
            self._conn.autocommit = True
            with self._conn.cursor() as cur:
                cur.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        triggers = partitions.for_record(record)
        done = []
        with self._conn.cursor() as cur:
            tables = partitions.partitioned(cur, record.tables)
            self._partitioned = (frozenset(t.qualified for t in record.tables), tables)
            if not tables:
                self.close()
                return []
            if self.moves is not None:
                self.moves.check(cur, triggers, tables)
            for table in tables:
                for name, statement in _lacking(cur, triggers, table):
                    if self._create(cur, statement, name, table.qualified):
                        done.append(name)
        return done

    def _create(self, cur, statement: sql.Composed, name: str, table: str) -> bool:
        text = statement.as_string(cur)
        try:
            cur.execute(statement)
        except psycopg2.errors.LockNotAvailable:
            log.info("%s of set table %s: its TRUNCATE trigger waits for a lock (writers); tried again in %gs",
                     name, table, self.interval)
            return False
        except psycopg2.Error as exc:
            if self._conn.closed:
                raise
            now = time.monotonic()
            if now - self._warned.get(name, -WARN_INTERVAL) >= WARN_INTERVAL:
                self._warned[name] = now
                log.warning("%s of set table %s has no TRUNCATE trigger, so a TRUNCATE of it would not reach "
                            "Kafka, and the relay cannot create it: %s; run as its owner: %s;", name, table,
                            str(exc).strip().splitlines()[0], text)
            return False
        log.info("%s of set table %s: created its TRUNCATE trigger (%s)", name, table, text)
        self._warned.pop(name, None)
        return True

    def close(self) -> None:
        """Close the watch's connection (never raises)."""
        close_quietly(self._conn)
        self._conn = None


def _lacking(cur, triggers: partitions.TruncateTriggers, table) -> list[tuple[str, sql.Composed]]:
    """(what, the CREATE TRIGGER statement) of each trigger table and its leaf partitions lack."""
    out = [(f"table {table.qualified}", partitions.root_statement(triggers, table, suffix))
           for suffix in partitions.missing_root(cur, triggers, table)]
    leaves = partitions.missing(cur, triggers, table)
    root = partitions.table_oid(cur, table) if leaves else 0
    return out + [(f"partition {leaf}", triggers.leaf_statement(leaf, root)) for _oid, leaf in leaves]
