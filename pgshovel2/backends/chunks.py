"""Online snapshots in the database: key-ordered chunks of a table and the watermarks around them.

A chunk is ``SELECT <row in capture form>, <key as text> FROM t WHERE (key) > (last) [AND (where)]
ORDER BY key LIMIT n``, read in a transaction of its own (:class:`ChunkReader`). The last key is
kept as the key columns' output text and cast back with each column's type, which round-trips
every type a primary key can have.

A watermark is a point in the set's stream written in a transaction of its own
(:func:`write_watermark`): the trigger backend queues a PgQ event of type ``W`` in the set's
queue; the logical backend writes the transactional message ``pgshovel2.version`` with a JSON
object that has a ``watermark`` and no ``version`` field -- the one prefix both decoders (our
plugin and pgoutput) pass on at its place, so no decoder changes; the relay reads such a
message as a watermark, never as a set version.
"""

import json
from collections.abc import Callable
from typing import NamedTuple

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from psycopg2 import sql

from pgshovel2.backends import logical_version, pgoutput, where_expr
from pgshovel2.catalog import Table
from pgshovel2.db import connect
from pgshovel2.errors import PgshovelError
from pgshovel2.setrecord import SetRecord, SlotCapture

WATERMARK_EVENT = "W"  # the PgQ ev_type of a watermark (trigger backend)


class Chunk(NamedTuple):
    """Rows read for one chunk: rows in capture form (table.columns order), in key order; last_key:
    the key columns' text of the last row (None when the chunk is empty)."""

    rows: list[list]
    last_key: list[str] | None


def _key_types(cur, table: Table) -> list[str]:
    cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped", (table.sql_name,))
    types = dict(cur.fetchall())
    return [types[k] for k in table.key]


def _key_list(table: Table) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in table.key)


def _compare(table: Table, key_types: list[str], op: str) -> sql.Composable:
    """(key) <op> (%s::type, ...): the key against one key given as its columns' text."""
    vals = sql.SQL(", ").join(sql.SQL("%s::" + t) for t in key_types)  # format_type output: trusted SQL
    if len(table.key) > 1:
        return sql.SQL("(({})) " + op + " (({}))").format(_key_list(table), vals)
    return sql.SQL("{} " + op + " {}").format(_key_list(table), vals)


def _where(table: Table, key_types: list[str], last_key: list[str] | None, where: str | None,
           extra: tuple[sql.Composable, ...] = ()) -> sql.Composable:
    parts: list[sql.Composable] = []
    if last_key is not None:
        parts.append(_compare(table, key_types, ">"))
    parts.extend(extra)
    if where:
        parts.append(where_expr.condition(where))  # one expression, or WhereError
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(parts) if parts else sql.SQL("")


# Key types whose capture form is the value itself (ints) or the type's output text (the rest):
# such a key is given back to the server as text cast to the type (ChunkReader.read_keys).
_TEXT_KEYS = frozenset({"smallint", "integer", "bigint", "text", "uuid", "character varying"})


def _text_key(key_type: str) -> bool:
    """True for a format_type output of _TEXT_KEYS (a typmod allowed; arrays, domains: False)."""
    return key_type.split("(")[0] in _TEXT_KEYS and not key_type.endswith("]")


class ChunkReader:
    """Reads chunks of a set's tables on a connection of its own (each chunk in a fresh
    transaction). record: the set record (dsn, backend, capture form); error: the PgshovelError
    class raised when the database cannot be reached."""

    def __init__(self, record: SetRecord, encode_row: str | None, error: type[PgshovelError]):
        self.record, self.encode_row, self.error = record, encode_row, error
        self.conn = connect(record.relay_dsn, "the online snapshot", error)
        self.conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        try:
            self.marks = connect(record.relay_dsn, "the online snapshot's watermarks", error)
        except BaseException:
            self.conn.close()
            raise
        self._types: dict[str, list[str]] = {}

    def read(self, table: Table, last_key: list[str] | None, where: str | None, limit: int) -> Chunk:
        """The next chunk of table after last_key (None: from the start) matching where (SQL or None),
        at most limit rows. Raises psycopg2.Error as the server does."""
        width = len(table.key)
        fetched, convert = self._fetch(table, lambda types: (
            _where(table, types, last_key, where), [*(last_key or [])]), limit)
        rows = [convert(r[:-width]) for r in fetched]
        return Chunk(rows, [str(v) for v in fetched[-1][-width:]] if fetched else None)

    def read_keys(self, table: Table, after: list[str] | None, upto: list[str] | None, where: str | None,
                  keys: list[list]) -> list[list]:
        """The current rows (capture form, as :meth:`read`, in key order) of table in the chunk range
        after < key <= upto (key columns' text as Chunk.last_key; None: unbounded) matching where,
        read in one query in a fresh transaction, narrowed to keys (each the key columns' capture
        values in table.key order, as a change row holds them) when every key column's type is in
        _TEXT_KEYS; otherwise every row of the range. The caller picks its keys among them (by
        Kafka key); a key no longer in the table gives nothing. Raises psycopg2.Error as the server
        does."""
        if not keys:
            return []
        width = len(table.key)

        def condition(types: list[str]) -> tuple[sql.Composable, list]:
            extra, params = [], [*(after or [])]
            if upto is not None:
                extra.append(_compare(table, types, "<="))
                params += upto
            if all(_text_key(t) for t in types):
                one = sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL("%s::" + t) for t in types))
                extra.append(sql.SQL("({}) IN ({})").format(_key_list(table), sql.SQL(", ").join([one] * len(keys))))
                params += [str(v) for k in keys for v in k]
            return _where(table, types, after, where, tuple(extra)), params

        fetched, convert = self._fetch(table, condition, None)
        return [convert(r[:-width]) for r in fetched]

    def _fetch(self, table: Table, condition, limit: int | None) -> tuple[list[tuple], Callable]:
        """Rows of SELECT <capture row>, <key>::text FROM table t <condition(key types)> ORDER BY key
        [LIMIT limit], read in a fresh transaction (rolled back), and the capture-form converter."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SET TRANSACTION READ ONLY")  # the session's default too; --where runs in it
                if self.encode_row is None:
                    pgoutput.pin_settings(cur)
                if table.qualified not in self._types:
                    self._types[table.qualified] = _key_types(cur, table)
                where, params = condition(self._types[table.qualified])
                keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in table.key)
                # t.<key>: a bare name would be the "<key>"::text output column, sorted as text
                query = sql.SQL("SELECT {}, {} FROM {} t{} ORDER BY {}").format(
                    self._select(table), keys, sql.Identifier(*table.relation), where, _key_list(table))
                if limit is not None:
                    query, params = query + sql.SQL(" LIMIT %s"), [*params, limit]
                convert = self._converter(cur, table)
                cur.execute(query, params)
                return cur.fetchall(), convert
        finally:
            self.conn.rollback()

    def _select(self, table: Table) -> sql.Composable:
        if self.encode_row is not None:
            attnums = sql.Literal([c.attnum for c in table.columns])
            return sql.SQL("{}(t.*, {}::int2[])").format(sql.Identifier(*self.encode_row.split(".")), attnums)
        return sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)

    def _converter(self, cur, table: Table):
        if self.encode_row is not None:
            return lambda values: json.loads(values[0])
        types = pgoutput.column_types(cur, table)
        raw = psycopg2.extensions.new_type(tuple(types.oids), "PGSHOVEL2_TEXT", lambda value, _cur: value)
        psycopg2.extensions.register_type(raw, cur)  # this cursor only: every value as its output text
        convs = types.converters
        return lambda values: [None if v is None else conv(v) for v, conv in zip(values, convs, strict=True)]

    def watermark(self, payload: dict) -> None:
        """Commit a watermark carrying payload into the set's stream (:func:`write_watermark`)."""
        write_watermark(self.marks, self.record, payload)

    def estimate(self, table: Table) -> int:
        """The table's estimated rows (:func:`estimate_rows`)."""
        try:
            with self.conn.cursor() as cur:
                return estimate_rows(cur, table)
        finally:
            self.conn.rollback()

    def close(self) -> None:
        """Close both connections (never raises)."""
        for conn in (self.conn, self.marks):
            try:
                conn.close()
            except psycopg2.Error:
                pass


def write_watermark(conn, record: SetRecord, payload: dict) -> None:
    """Commit a watermark carrying payload (JSON object) into the set's stream on conn (autocommit
    off; the transaction is committed here). Raises psycopg2.Error."""
    with conn.cursor() as cur:
        if isinstance(record.capture, SlotCapture):
            cur.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                        (logical_version.VERSION_PREFIX, json.dumps({"watermark": payload})))
        else:
            cur.execute("SELECT pgq.insert_event(%s, %s, %s)",
                        (record.capture.queue, WATERMARK_EVENT, json.dumps(payload)))
    conn.commit()
    if not isinstance(record.capture, SlotCapture):
        _tick_now(conn, record.capture.queue)


def _tick_now(conn, queue: str) -> None:
    """Tick the queue at once (pgq.force_tick, then pgq.ticker), so the batch holding a watermark is
    ready without waiting for the ticker. A PgQ without force_tick leaves it to the ticker."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pgq.force_tick(%s)", (queue,))
            cur.execute("SELECT pgq.ticker(%s)", (queue,))
        conn.commit()
    except psycopg2.errors.UndefinedFunction:
        conn.rollback()


def check_table(cur, table: Table, where: str | None) -> None:
    """Raise ValueError naming the table when it has no key, or when where is not one SQL expression
    (pgshovel2.backends.where_expr: WhereError) or does not parse and plan against the table, or fails
    on its first rows (the chunk query, planned then run with LIMIT 1, in a read-only transaction rolled
    back: a write or nextval() fails there). cur: a cursor whose connection is not in autocommit."""
    if where is not None:
        where_expr.check(where)
    if not table.key:
        raise ValueError(f"table {table.qualified} has no primary key (or replica identity index): an online "
                         "snapshot reads it in key order and cannot; add a primary key")
    query = sql.SQL("SELECT 1 FROM {} t{}").format(sql.Identifier(*table.relation),
                                                   _where(table, [], None, where))
    try:
        cur.execute("SET TRANSACTION READ ONLY")
        cur.execute(sql.SQL("EXPLAIN ") + query, ())  # with (no) parameters: the condition's % are doubled
        if where is not None:  # run it on the first rows, where a write is refused (nothing else)
            cur.execute("SET LOCAL statement_timeout = '10s'")
            cur.execute(query + sql.SQL(" LIMIT 1"), ())
    except psycopg2.Error as exc:
        raise ValueError(f"--where {where!r} does not apply to table {table.qualified}: "
                         f"{str(exc).strip()}") from exc
    finally:
        cur.connection.rollback()


def estimate_rows(cur, table: Table) -> int:
    """pg_class.reltuples of table (0 when never analyzed): the ETA's row estimate."""
    cur.execute("SELECT greatest(reltuples, 0)::int8 FROM pg_class WHERE oid = %s::regclass", (table.sql_name,))
    row = cur.fetchone()
    return int(row[0]) if row else 0
