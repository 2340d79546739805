"""The initial snapshot: a set's existing rows read in one REPEATABLE READ
transaction, with the txid snapshot that decides the handoff to the queue.

Every queued change whose transaction is visible in that txid snapshot is
already in the snapshot rows, and is skipped by the stream; every other one is
not, and is relayed: snapshot + stream = source, exactly.
"""

import json
import time
from collections.abc import Callable, Iterator

from psycopg2 import sql

from pgshovel2.catalog import Table
from pgshovel2.db import connect
from pgshovel2.errors import RelayError


class Snapshot:
    """An open snapshot transaction on the set's database (context manager).

    txid_snapshot: from txid_current_snapshot(), text form ``xmin:xmax:xip``.
    exported: name of a snapshot exported by another session (the logical backend's
    slot creation) to read in, None for a new one. encode_row: the SQL function
    turning a row into the backend's row form (trigger backend: the capture
    extension's; logical: the decoder extension's, same value forms).
    """

    def __init__(self, dsn: str, exported: str | None = None, encode_row: str = "pgshovel2.encode_row"):
        self._conn = connect(dsn, "the snapshot", RelayError)
        self._conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        self._encode_row = encode_row
        with self._conn.cursor() as cur:
            if exported is not None:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (exported,))
            cur.execute("SELECT txid_current_snapshot()::text")
            self.txid_snapshot: str = cur.fetchone()[0]

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.rollback()
        self._conn.close()

    def count(self, table: Table) -> int:
        """Row count of a table in the snapshot (for progress)."""
        with self._conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table.schema, table.name)))
            return cur.fetchone()[0]

    def rows(self, table: Table, fetch_size: int = 5000) -> Iterator[list]:
        """Stream a table's rows in trigger form (the encode_row function), bounded memory."""
        attnums = [c.attnum for c in table.columns]
        # t.* (not t): a whole-row reference even when the table has a column named t
        query = sql.SQL("SELECT {}(t.*, %s::int2[]) FROM {} t").format(
            sql.Identifier(*self._encode_row.split(".")), sql.Identifier(table.schema, table.name))
        with self._conn.cursor(name="snapshot_rows") as cur:
            cur.itersize = fetch_size
            cur.execute(query, (attnums,))
            for (data,) in cur:
                yield json.loads(data)


def take(dsn: str, tables: tuple[Table, ...], emit: Callable[[Table, list, int], None],
         progress: Callable[[Table, int, int], None], progress_interval: float = 5.0,
         exported: str | None = None, encode_row: str = "pgshovel2.encode_row") -> str:
    """Read every table of the set in one snapshot; returns its txid snapshot text.

    emit(table, row, ordinal) is called per row; progress(table, done, total)
    at most every progress_interval seconds and at each table's end. exported,
    encode_row: see :class:`Snapshot`.
    """
    with Snapshot(dsn, exported, encode_row) as snap:
        ordinal = 0
        last = time.monotonic()
        for table in tables:
            total, done = snap.count(table), 0
            for row in snap.rows(table):
                emit(table, row, ordinal)
                ordinal += 1
                done += 1
                if done % 1000 == 0 and time.monotonic() - last >= progress_interval:
                    last = time.monotonic()
                    progress(table, done, total)
            progress(table, done, total)
        return snap.txid_snapshot
