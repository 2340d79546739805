"""The exporting transaction of a bootstrap and the plan of its parallel reads.

One psycopg2 connection in REPEATABLE READ exports its snapshot
(``pg_export_snapshot()``) and records the handoff position of the set's
backend in the same transaction (trigger: ``txid_current_snapshot()``; logical:
the consistent point of a temporary slot created with EXPORT_SNAPSHOT, whose
snapshot that connection adopts). It stays open while the readers run: each JDBC partition adopts the snapshot
with ``SET TRANSACTION SNAPSHOT``, so every partition reads the same state.
"""

import logging
import math
import uuid
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql
from psycopg2.extensions import parse_dsn
from psycopg2.extras import LogicalReplicationConnection

from pgshovel2 import names
from pgshovel2.bootstrap.manifest import BootstrapError
from pgshovel2.catalog import Table
from pgshovel2.db import connect

log = logging.getLogger(__name__)
INTEGER_KINDS = ("int2", "int4", "int8")
# Types whose JDBC values equal the codec's (WIRE.md) values exactly: such tables are read as plain
# columns (no Python per row). The rest go through pgshovel2.encode_row and the relay's codec.
NATIVE_KINDS = frozenset({"bool", "int2", "int4", "int8", "float4", "float8", "text", "varchar", "bpchar",
                          "name", "bytea"})
PK_ALIAS, ROW_ALIAS = "__pgshovel_pk", "__pgshovel_row"
DECODER = "pgshovel2_decoder"  # our output plugin (sql/decoder)
APPLICATION_NAME = "pgshovel2 bootstrap exporter"


@dataclass(frozen=True)
class ReadPlan:
    """How one table is read: a query and its key-range partitions.

    query: a parenthesized subquery with columns __pgshovel_pk (the first key
    column, or NULL) and either __pgshovel_row (the captured columns in trigger
    form, JSON text, from pgshovel2.encode_row: exactly what the relay encodes)
    or, when native, the captured columns themselves under their own names.
    column: the partition column (None: one partition); lower/upper: min and
    max of the first key column in the snapshot; partitions: how many.
    """

    table: Table
    query: str
    column: str | None
    lower: int
    upper: int
    partitions: int
    native: bool = False


def is_native(table: Table) -> bool:
    """True when every captured column is a NATIVE_KINDS scalar (readable as plain JDBC columns)."""
    return all(c.kind in NATIVE_KINDS and not c.is_array for c in table.columns)


def _select_list(table: Table, native: bool, encode_row: str) -> str:
    if native:
        return ", ".join(f"__pgshovel2_row__.{names.quote_ident(c.name)}" for c in table.columns)
    attnums = "{" + ",".join(str(c.attnum) for c in table.columns) + "}"
    return f"{encode_row}(__pgshovel2_row__, '{attnums}'::int2[])::text AS {ROW_ALIAS}"


class ExportedSnapshot:
    """An open exporting transaction (context manager; rolled back on exit).

    snapshot_id: the exported snapshot every reader adopts. handoff: the
    manifest's handoff record -- trigger backend: ``{backend, txid_snapshot}``
    (txid_current_snapshot() of the exporting transaction, from
    pg_export_snapshot()); logical backend: ``{backend, lsn, slot}``, the
    consistent point of a TEMPORARY slot of our plugin created with
    EXPORT_SNAPSHOT on a replication connection kept open meanwhile (the slot
    goes with it). encode_row: the function giving rows in capture form.
    Raises BootstrapError when the database cannot be reached or refuses.
    """

    def __init__(self, dsn: str, backend: str):
        self.dsn, self.backend = dsn, backend
        self.snapshot_id = "(not exported yet)"
        self._repl = None
        self._conn = connect(dsn, "the bootstrap", BootstrapError)
        self._conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        try:
            if backend == "logical":
                self._export_from_slot()
            else:
                self._export()
        except psycopg2.Error as exc:
            self.close()
            raise self.ended(exc) from exc
        log.info("exported snapshot %s, handoff %s", self.snapshot_id, self.handoff)

    @property
    def encode_row(self) -> str:
        """Qualified name of the row-encoding function in the set's database (per backend)."""
        return "pgshovel2_decoder.encode_row" if self.backend == "logical" else "pgshovel2.encode_row"

    def _export(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute("SET application_name = %s", (APPLICATION_NAME,))
            cur.execute("SELECT pg_export_snapshot(), txid_current_snapshot()::text")
            self.snapshot_id, self.txid_snapshot = cur.fetchone()
        self.handoff = {"backend": "trigger", "txid_snapshot": self.txid_snapshot}

    def _export_from_slot(self) -> None:
        self._repl = psycopg2.connect(self.dsn, connection_factory=LogicalReplicationConnection)
        slot = f"pgshovel2_boot_{uuid.uuid4().hex[:12]}"
        with self._repl.cursor() as cur:
            cur.execute(f'CREATE_REPLICATION_SLOT "{slot}" TEMPORARY LOGICAL {DECODER} EXPORT_SNAPSHOT')
            _, lsn, self.snapshot_id, _ = cur.fetchone()
        with self._conn.cursor() as cur:
            cur.execute("SET application_name = %s", (APPLICATION_NAME,))
            cur.execute("SET TRANSACTION SNAPSHOT %s", (self.snapshot_id,))
        self.handoff = {"backend": "logical", "lsn": lsn, "slot": slot}

    def __enter__(self) -> "ExportedSnapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the exporting transaction (the snapshot id becomes invalid; a temporary slot goes)."""
        if self._repl is not None and not self._repl.closed:
            self._repl.close()
        if self._conn.closed:
            return
        try:
            self._conn.rollback()
        except psycopg2.Error:  # the connection is gone already (e.g. terminated): nothing to end
            pass
        self._conn.close()

    def alive(self) -> bool:
        """True while the exporting transaction (or slot connection) is still open (its snapshot importable)."""
        try:
            with self._conn.cursor() as cur:
                if self._repl is None:
                    cur.execute("SELECT 1")
                    return True
                cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.handoff["slot"],))
                row = cur.fetchone()
                return bool(row and row[0])
        except psycopg2.Error:
            return False

    def check_table(self, table: Table) -> None:
        """Raise BootstrapError unless table and its captured columns are readable in the snapshot."""
        with self._conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (table.qualified,))
            (oid,) = cur.fetchone()
            if oid is None:
                raise BootstrapError(f"table {table.qualified} of the set does not exist (or is not visible) "
                                     f"in the database of the bootstrap")
            cur.execute("SELECT has_table_privilege(%s, 'SELECT')", (table.qualified,))
            if not cur.fetchone()[0]:
                raise BootstrapError(f"the bootstrap's database user may not SELECT from {table.qualified}")
            cur.execute("SELECT attnum, attname FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attnum > 0 AND NOT attisdropped", (table.qualified,))
            present = dict(cur.fetchall())
        for col in table.columns:
            if present.get(col.attnum) != col.name:
                raise BootstrapError(f"column {names.quote_ident(col.name)} (attnum {col.attnum}) of "
                                     f"{table.qualified} is not in the table any more: the set config is "
                                     "out of date")

    def ended(self, exc: Exception | None = None) -> BootstrapError:
        """The error for an exporting transaction that ended before every partition adopted its snapshot."""
        detail = f": {str(exc).strip()}" if exc is not None else ""
        return BootstrapError(f"the exported snapshot {self.snapshot_id} expired (its exporting transaction "
                              f"ended){detail}; nothing was written, run the bootstrap again")

    def plan(self, table: Table, partition_rows: int, max_partitions: int, native: bool = False) -> ReadPlan:
        """The read plan of table: key ranges sized from pg_class.reltuples (the key range when
        the table was never analyzed) and min/max of the first key column. native: read plain
        columns when the table allows it (:func:`is_native`).

        Raises BootstrapError when the table cannot be read or the exporting transaction ended.
        """
        try:
            plan = self._plan(table, partition_rows, max_partitions, native and is_native(table))
        except psycopg2.Error as exc:
            raise self.ended(exc) from exc
        log.info("table %s: read as %s", table.qualified, "plain columns" if plan.native else "encoded rows")
        return plan

    def _plan(self, table: Table, partition_rows: int, max_partitions: int, native: bool) -> ReadPlan:
        self.check_table(table)
        key = next((c for c in table.columns if table.key and c.name == table.key[0]), None)
        usable = key is not None and key.kind in INTEGER_KINDS and not key.is_array
        # The row alias must not be a column name (a column named like it would be passed instead).
        pk = f"__pgshovel2_row__.{names.quote_ident(key.name)}" if usable else "NULL::int8"
        query = (f"(SELECT {pk} AS {PK_ALIAS}, {_select_list(table, native, self.encode_row)} "
                 f"FROM {table.qualified} __pgshovel2_row__) AS pgshovel_bootstrap")
        if not usable:
            log.info("table %s: no integer key column to split on: one partition", table.qualified)
            return ReadPlan(table, query, None, 0, 0, 1, native)
        with self._conn.cursor() as cur:
            cur.execute("SELECT reltuples::int8 FROM pg_class WHERE oid = %s::regclass", (table.qualified,))
            estimate = cur.fetchone()[0]  # -1: never analyzed
            cur.execute(sql.SQL("SELECT min({k}), max({k}) FROM {t}").format(
                k=sql.Identifier(key.name), t=sql.Identifier(table.schema, table.name)))
            lower, upper = cur.fetchone()
        if lower is None:
            log.info("table %s is empty in the snapshot: one partition", table.qualified)
            return ReadPlan(table, query, None, 0, 0, 1, native)
        if estimate < 0:
            estimate = upper - lower + 1  # no statistics yet: assume a dense key
        parts = max(1, min(max_partitions, math.ceil(estimate / partition_rows), upper - lower + 1))
        log.info("table %s: ~%d rows, %d partition(s) on %s in [%d, %d]", table.qualified, estimate,
                 parts, key.name, lower, upper)
        return ReadPlan(table, query, PK_ALIAS if parts > 1 else None, lower, upper, parts, native)


def jdbc_url(dsn: str) -> tuple[str, dict[str, str]]:
    """(JDBC URL, connection properties {user, password}) of a libpq DSN (host, port, dbname, user, password)."""
    try:
        params = parse_dsn(dsn)
    except psycopg2.ProgrammingError as exc:
        raise BootstrapError(f"malformed database DSN of the set: {exc}") from exc
    host = params.get("host", "localhost")
    port = params.get("port", "5432")
    url = f"jdbc:postgresql://{host}:{port}/{params.get('dbname', params.get('user', 'postgres'))}"
    props = {k: params[k] for k in ("user", "password") if k in params}
    return url, props


def redacted(dsn: str) -> str:
    """The DSN without its password (for the manifest)."""
    try:
        params = parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return ""
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "password")
