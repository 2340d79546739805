"""The relay's watch for tables of its set dropped or renamed where no event says so (PL/pgSQL
capture, logical decoding: :mod:`pgshovel2.backends.dropped`).

Between transactions, at the relay's start and then every ``interval`` seconds, it checks the
tables of the set version in effect that the set's latest version still has (a table an upgrade
removed is not a drop), on a connection of its own; for each one gone it writes the marker that
ends the table in the stream, once (again only after the marker was relayed and a newer check
finds the table gone again, which cannot happen to a dropped table); likewise a rename marker
for a table whose name now the version in effect does not have. The relay ends the table
when it reaches the marker (:meth:`pgshovel2.relay.control.ControlEvents.apply`). A marker
written twice (a relay restarted before it reached its first one; the C event trigger's ``S``
as well) ends nothing the second time. Logical sets check by OID: a table's stored OID
(Table.oid, recorded by ``set create`` / ``set upgrade``) or, for records without one, the OID
its name has at the first check.
"""

import logging
import time
from collections.abc import Callable

import psycopg2

from pgshovel2.backends import dropped
from pgshovel2.catalog import Table
from pgshovel2.db import connect, outage
from pgshovel2.errors import UnavailableError
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)
INTERVAL = 10.0


class DropWatch:
    """record: the set's record (capture and DSN); latest_tags(): tags of the tables of the set's
    latest version (ZooKeeper)."""

    def __init__(self, record: SetRecord, latest_tags: Callable[[], set[str]], interval: float = INTERVAL):
        self.record, self.latest_tags, self.interval = record, latest_tags, interval
        self._next = 0.0
        self._marked: set[str] = set()
        self._renames: dict[str, tuple[str, str]] = {}  # tag -> the name a rename marker was written for
        self._oids: dict[str, int] = {t.qualified: t.oid for t in record.tables if t.oid is not None}
        self._conn = None

    def ended(self, tag: str) -> None:
        """The relay ended table tag in the set (its marker, or an event trigger's, was reached)."""
        self._marked.discard(tag)

    def step(self, record: SetRecord) -> None:
        """Check record's tables (the version in effect) when a check is due; write a marker for each
        one dropped. Raises UnavailableError when the database or ZooKeeper went away."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.interval
        try:
            latest = self.latest_tags()
        except Exception as exc:  # ZooKeeper away: the leadership check handles it; check again later
            log.debug("drop watch: the set's latest version not read: %s", exc)
            return
        tables = [t for t in record.tables if t.qualified in latest and t.qualified not in self._marked]
        if not tables:
            return
        try:
            self._check(tables)
        except psycopg2.Error as exc:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
            if outage(exc, conn):
                raise UnavailableError(f"set {self.record.name!r}: the database went away while checking for dropped "
                                       f"tables: {str(exc).strip()}") from exc
            raise

    def _check(self, tables: list[Table]) -> None:
        if self._conn is None:
            self._conn = connect(self.record.relay_dsn, f"set {self.record.name!r} (as its relay role)",
                                 UnavailableError)
            self._conn.autocommit = True
        with self._conn.cursor() as cur:
            where = self._where(cur, tables)
            for table in tables:
                if table.qualified not in where:
                    self._mark(cur, table)
                elif where[table.qualified] != table.relation and self._renames.get(table.qualified) != \
                        where[table.qualified]:
                    self._rename(cur, table, where[table.qualified])

    def _where(self, cur, tables: list[Table]) -> dict[str, tuple[str, str]]:
        """Tag -> (schema, name) now of the tables still there (a table whose OID is not known: as it is)."""
        return dropped.tables_there(cur, self.record, tables, self._oids)

    def _rename(self, cur, table: Table, relation: tuple[str, str]) -> None:
        dropped.mark_rename(cur, self.record, table, relation)
        self._renames[table.qualified] = relation
        log.info("table %s of set %r is %s.%s now: rename marker written", table.qualified, self.record.name,
                 *relation)

    def _mark(self, cur, table: Table) -> None:
        why = "noticed by the relay: the table is gone"
        dropped.mark_drop(cur, self.record, table, why)
        self._marked.add(table.qualified)
        log.warning("table %s of set %r was dropped (%s): marker written; the table ends in the set there",
                    table.qualified, self.record.name, why)

    def close(self) -> None:
        """Close the watch's connection (never raises)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg2.Error:
                pass
