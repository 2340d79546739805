"""Reading a set's tables in one consistent snapshot, and exporting that snapshot.

:class:`TableReader` is a REPEATABLE READ transaction on the set's database that reads
rows in the capture form (the backend's ``encode_row`` SQL function: the same value
forms its stream carries). :class:`ExportedSnapshot` is a reader whose snapshot other
sessions can adopt (``SET TRANSACTION SNAPSHOT``: Spark's JDBC partitions, the replica
bootstrap's COPY) and which knows its *handoff*: every change the stream carries that is
covered by the handoff is already in a copy read under the snapshot, every other one is
not. The backends make them (:func:`pgshovel2.backends.trigger.export`,
:func:`pgshovel2.backends.logical.export`); this module has no backend knowledge.
"""

import json
import logging
from collections.abc import Iterator

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.backends import pgoutput
from pgshovel2.catalog import Table
from pgshovel2.db import connect
from pgshovel2.errors import PgshovelError
from pgshovel2.txids import ConsistentPoint, TxidSnapshot

log = logging.getLogger(__name__)
APPLICATION_NAME = "pgshovel2 snapshot"


# How SET TRANSACTION SNAPSHOT refuses an id its exporting transaction gave once that transaction
# ended, by PostgreSQL version and moment: invalid snapshot identifier, snapshot does not exist,
# could not import the requested snapshot.
_SNAPSHOT_REFUSED = (psycopg2.errors.InvalidParameterValue, psycopg2.errors.UndefinedObject,
                     psycopg2.errors.ObjectNotInPrerequisiteState)


class TableReader:
    """A read-only REPEATABLE READ transaction on dsn's database (context manager).

    encode_row: qualified name of the SQL function turning a row into the capture form
    (``pgshovel2.encode_row`` or ``pgshovel2_decoder.encode_row``), or None when the server
    has neither (a logical set read through pgoutput): the columns are then read as their
    output text with the settings pinned and converted as the pgoutput stream's
    (:mod:`pgshovel2.codec.textforms`). error: the
    PgshovelError class raised when the database cannot be reached or refuses.
    txid_snapshot: ``txid_current_snapshot()`` of the transaction (``xmin:xmax:xip``).
    wal_insert_lsn: ``pg_current_wal_insert_lsn()`` (text) read in the statement that took the
    snapshot, so an instant after it; None on a standby.
    """

    def __init__(self, dsn: str, encode_row: str | None, error: type[PgshovelError], snapshot_id: str | None = None):
        self.dsn, self.encode_row, self.error = dsn, encode_row, error
        self.conn = connect(dsn, "the snapshot", error)
        self.conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        adopting = snapshot_id is not None
        try:
            with self.conn.cursor() as cur:
                cur.execute("SET application_name = %s", (APPLICATION_NAME,))
                if adopting:
                    cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_id,))
                    adopting = False
                if encode_row is None:
                    pgoutput.pin_settings(cur, search_path=True)
                cur.execute("SELECT txid_current_snapshot()::text, CASE WHEN pg_is_in_recovery() THEN NULL "
                            "ELSE pg_current_wal_insert_lsn()::text END")
                self.txid_snapshot, self.wal_insert_lsn = cur.fetchone()
        except psycopg2.Error as exc:
            self.close()
            if adopting and isinstance(exc, _SNAPSHOT_REFUSED):
                raise error(f"the exported snapshot {snapshot_id} expired (its exporting transaction ended) "
                            f"before it was adopted: {str(exc).strip()}; nothing was written, run it again") from exc
            raise error(f"cannot open the snapshot transaction: {str(exc).strip()}") from exc

    def __enter__(self) -> "TableReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the transaction (never raises)."""
        if self.conn.closed:
            return
        try:
            self.conn.rollback()
        except psycopg2.Error:  # the connection is gone already: nothing to end
            pass
        self.conn.close()

    def count(self, table: Table) -> int:
        """Row count of a table in the snapshot (for progress)."""
        with self.conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(*table.relation)))
            return cur.fetchone()[0]

    def rows(self, table: Table, fetch_size: int = 5000) -> Iterator[list]:
        """Stream a table's rows in capture form (lists in table.columns order), bounded memory."""
        if self.encode_row is None:
            yield from self._text_rows(table, fetch_size)
            return
        attnums = [c.attnum for c in table.columns]
        # t.* (not t): a whole-row reference even when the table has a column named t
        query = sql.SQL("SELECT {}(t.*, %s::int2[]) FROM {} t").format(
            sql.Identifier(*self.encode_row.split(".")), sql.Identifier(*table.relation))
        with self.conn.cursor(name="snapshot_rows") as cur:
            cur.itersize = fetch_size
            cur.execute(query, (attnums,))
            for (data,) in cur:
                yield json.loads(data)

    def _text_rows(self, table: Table, fetch_size: int) -> Iterator[list]:
        with self.conn.cursor() as cur:
            types = pgoutput.column_types(cur, table)
        raw = psycopg2.extensions.new_type(tuple(types.oids), "PGSHOVEL2_TEXT", lambda value, _cur: value)
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns) if table.columns else sql.SQL("")
        query = sql.SQL("SELECT {} FROM {} t").format(columns, sql.Identifier(*table.relation))
        convs = types.converters
        with self.conn.cursor(name="snapshot_rows") as cur:
            cur.itersize = fetch_size
            psycopg2.extensions.register_type(raw, cur)  # this cursor only: every value as its output text
            cur.execute(query)
            for values in cur:
                yield [None if v is None else conv(v) for v, conv in zip(values, convs, strict=True)]

    def check_table(self, table: Table) -> None:
        """Raise self.error unless table and its captured columns are readable in the snapshot."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (table.sql_name,))
            if cur.fetchone()[0] is None:
                raise self.error(f"table {table.qualified} of the set does not exist (or is not visible) "
                                 "in the snapshot")
            cur.execute("SELECT has_table_privilege(%s, 'SELECT')", (table.sql_name,))
            if not cur.fetchone()[0]:
                raise self.error(f"the database user may not SELECT from {table.qualified}")
            cur.execute("SELECT attnum, attname FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attnum > 0 AND NOT attisdropped", (table.sql_name,))
            present = dict(cur.fetchall())
        for col in table.columns:
            if present.get(col.attnum) != col.name:
                raise self.error(f"column {names.quote_ident(col.name)} (attnum {col.attnum}) of "
                                 f"{table.qualified} is not in the table any more: the set config is out of date")


class ExportedSnapshot(TableReader):
    """A TableReader whose snapshot is exported (snapshot_id) until it is closed.

    handoff: TxidSnapshot (trigger backend: the exporting transaction's txid snapshot) or
    ConsistentPoint (logical: the consistent point of the slot that exported it).
    handoff_record: the same as JSON (``{backend, txid_snapshot}`` or ``{backend, lsn, slot}``),
    as bootstrap manifests and the relay's snapshot record store it. holder: a replication
    connection that must stay open for the snapshot to stay importable (logical), or None.
    """

    def __init__(self, dsn: str, encode_row: str, error: type[PgshovelError], snapshot_id: str,
                 handoff: TxidSnapshot | ConsistentPoint, handoff_record: dict, holder=None):
        self.holder = holder
        try:
            super().__init__(dsn, encode_row, error, snapshot_id)
        except BaseException:
            self._close_holder()
            raise
        self.snapshot_id, self.handoff, self.handoff_record = snapshot_id, handoff, handoff_record
        log.info("exported snapshot %s, handoff %s", snapshot_id, handoff_record)

    def close(self) -> None:
        """End the transaction and the holder (the snapshot id becomes invalid; a temporary slot goes)."""
        super().close()
        self._close_holder()

    def _close_holder(self) -> None:
        if self.holder is not None and not self.holder.closed:
            self.holder.close()

    def alive(self) -> bool:
        """True while the snapshot is importable (the exporting session is still open)."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT 1")
            return self.holder is None or not self.holder.closed
        except psycopg2.Error:
            return False

    def ended(self, exc: Exception | None = None) -> PgshovelError:
        """The error for a snapshot that ended before every reader adopted it."""
        detail = f": {str(exc).strip()}" if exc is not None else ""
        return self.error(f"the exported snapshot {self.snapshot_id} expired (its exporting transaction "
                          f"ended){detail}; nothing was written, run it again")


def export_txid_snapshot(dsn: str, encode_row: str, error: type[PgshovelError]) -> ExportedSnapshot:
    """Export a new snapshot from a REPEATABLE READ transaction; its handoff is that
    transaction's txid snapshot (the trigger backend's rule). Raises error."""
    conn = connect(dsn, "the snapshot", error)
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET application_name = %s", (APPLICATION_NAME,))
            cur.execute("SELECT pg_export_snapshot(), txid_current_snapshot()::text")
            snapshot_id, txid_snapshot = cur.fetchone()
    except psycopg2.Error as exc:
        conn.close()
        raise error(f"cannot export a snapshot: {str(exc).strip()}") from exc
    handoff = TxidSnapshot.parse(txid_snapshot)
    return ExportedSnapshot(dsn, encode_row, error, snapshot_id, handoff,
                            {"backend": "trigger", "txid_snapshot": txid_snapshot}, holder=conn)
