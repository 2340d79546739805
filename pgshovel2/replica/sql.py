"""SQL of replica apply: multi-row statements of changes (grouped by
pgshovel2.replica.grouping), table DDL, and the ALTERs that take a target table
from one set version's layout to the next.

Pure functions of the set record's tables (pgshovel2.catalog.Table) and the
consumer library's decoded changes (pgshovel2.consumer.Change); no I/O except
``mogrify`` on a cursor, which only quotes values.
"""

from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.catalog import Column, Table
from pgshovel2.consumer import Change
from pgshovel2.errors import PgshovelError
from pgshovel2.replica.values import Adapt, adapter


class ReplicaError(PgshovelError):
    """Replica apply cannot go on without diverging from the source (the target is left unchanged)."""


def column_type(col: Column) -> str:
    """The target column's type: the source's, except enums (their types are not copied): text."""
    if col.kind == "enum":
        return "text[]" if col.is_array else "text"
    return col.pg_type


@dataclass(frozen=True)
class TableMap:
    """How the changes of one set table become SQL on the target (same schema.table name).

    fields: decoded field name (Avro-escaped or plain column name) -> column
    name; key: the key columns. adapters: column name -> decoded value to what
    psycopg2 sends (pgshovel2.replica.values). An unkeyed table (no key) is
    applied as a multiset: an INSERT adds its row, a DELETE removes one row
    equal to the deleted one (:meth:`delete_one`), an UPDATE is both (its ``d``
    of the old row, then its ``u``).
    """

    table: Table
    fields: dict[str, str]
    adapters: dict[str, Adapt]
    types: dict[str, str]

    @classmethod
    def of(cls, table: Table, json_encoding: bool = False) -> "TableMap":
        """The map of table; json_encoding: the set's encoding is ``json`` (else Avro)."""
        fields = {}
        for col in table.columns:
            for name in (col.name, *col.aliases):
                fields[names.avro_name(name)] = col.name
                fields[name] = col.name
        return cls(table, fields, {c.name: adapter(c, json_encoding) for c in table.columns},
                   {c.name: column_type(c) for c in table.columns})

    @property
    def ident(self) -> sql.Composed:
        return sql.SQL(".").join([sql.Identifier(self.table.schema), sql.Identifier(self.table.name)])

    def row(self, data: dict[str, Any], where: str) -> dict[str, Any]:
        """Column name -> value of a decoded key or value; ReplicaError for an unknown field."""
        out = {}
        for field, value in data.items():
            column = self.fields.get(field)
            if column is None:
                raise ReplicaError(f"{where}: field {field!r} is not a column of {self.table.qualified} "
                                   "in the set version applied on the target")
            out[column] = self.adapters[column](value)
        return out

    def _insert_head(self, cols: list[str]) -> sql.Composed:
        return sql.SQL("INSERT INTO {} ({})").format(self.ident, sql.SQL(", ").join(map(sql.Identifier, cols)))

    def _on_conflict(self, cols: list[str]) -> sql.Composed:
        others = [c for c in cols if c not in self.table.key]
        update = (sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)) if others \
            else sql.SQL("DO NOTHING")
        return sql.SQL("ON CONFLICT ({}) {}").format(sql.SQL(", ").join(map(sql.Identifier, self.table.key)),
                                                      update)

    def classify(self, change: Change) -> tuple[str, dict[str, Any] | None]:
        """(kind, values) of change: ``upsert`` (column -> value of the after-image), ``delete``
        (key column -> value) or ``truncate`` (None); an unkeyed table's: ``insert`` (column ->
        value of the row) or ``delete_one`` (column -> value of the deleted row). Raises
        ReplicaError for what cannot be applied."""
        where = f"{change.topic!r} [{change.partition}] offset {change.offset}"
        if change.op == "t":
            return "truncate", None
        if not self.table.key:
            return self._classify_unkeyed(change, where)
        if change.op == "d":
            if change.key is None:
                raise ReplicaError(f"{where}: a delete without a key")
            return "delete", self.row(change.key, f"the key of {where}")
        if change.op in ("c", "u", "r") and change.value is not None:
            row = self.row(change.value, f"the value of {where}")
            if change.unchanged:  # keep the target's values (an UPDATE of the key: see moved_row)
                self._known(change.unchanged, where)
                row = {c: v for c, v in row.items() if c not in change.unchanged}
            return "upsert", row
        raise ReplicaError(f"{where}: cannot apply op {change.op!r} with value {change.value!r}")

    def _classify_unkeyed(self, change: Change, where: str) -> tuple[str, dict[str, Any]]:
        """classify for an unkeyed table (a multiset: see the class docstring)."""
        if change.value is None or change.unchanged or change.op not in ("c", "u", "r", "d"):
            raise ReplicaError(f"{where}: cannot apply op {change.op!r} of unkeyed table {self.table.qualified} "
                               f"with value {change.value!r:.80} (an unkeyed table's changes carry whole rows)")
        row = self.row(change.value, f"the value of {where}")
        return ("delete_one" if change.op == "d" else "insert"), row

    def delete_one(self, cur, row: dict[str, Any]) -> bytes:
        """The DELETE of one row of an unkeyed table equal to row (every column: by its text form, so
        any type compares, json and point included, and NULL equals NULL), rendered by cur. It scans
        the table; deletes nothing when no row is equal (the target had diverged)."""
        cols = list(row)
        match = sql.SQL(" AND ").join(
            sql.SQL(f"{{0}}::text IS NOT DISTINCT FROM (%s::{self.types[c]})::text").format(sql.Identifier(c))
            for c in cols) if cols else sql.SQL("true")
        query = sql.SQL("DELETE FROM {0} WHERE ctid = (SELECT ctid FROM {0} WHERE {1} LIMIT 1)").format(
            self.ident, match)
        return cur.mogrify(query.as_string(cur), [row[c] for c in cols])

    def insert_many(self, cur, rows: list[dict[str, Any]]) -> bytes:
        """One INSERT of rows (same columns) of an unkeyed table, rendered by cur."""
        cols = list(rows[0])
        if not cols:  # a table without columns: one INSERT per row
            one = sql.SQL("INSERT INTO {} DEFAULT VALUES").format(self.ident).as_string(cur).encode()
            return b"; ".join([one] * len(rows))
        template = self._row_template(cols)
        values = b", ".join(cur.mogrify(template, [r[c] for c in cols]) for r in rows)
        return self._insert_head(cols).as_string(cur).encode() + b" VALUES " + values

    def _known(self, columns: frozenset[str], where: str) -> None:
        unknown = sorted(columns - set(self.adapters))
        if unknown:
            raise ReplicaError(f"{where}: unchanged column(s) {unknown} are not columns of {self.table.qualified} "
                               "in the set version applied on the target")

    def moved_row(self, cur, old_key: dict[str, Any], row: dict[str, Any], unchanged: frozenset[str]) -> bytes:
        """An UPDATE of the key whose unchanged columns were not logged: INSERT of the new row (row:
        its logged columns) with the unchanged columns copied from the old key's row, rendered by cur;
        to run before that row's DELETE. Inserts nothing if the old row is missing (the DELETE's
        count shows nothing either: the target had already diverged)."""
        cols, copied = list(row), sorted(unchanged)
        select = sql.SQL("SELECT {} FROM {} WHERE ({}) = ({})").format(
            sql.SQL(", ").join([sql.SQL(f"%s::{self.types[c]}") for c in cols] + list(map(sql.Identifier, copied))),
            self.ident, sql.SQL(", ").join(map(sql.Identifier, self.table.key)),
            sql.SQL(", ").join(sql.SQL(f"%s::{self.types[k]}") for k in self.table.key))
        head = self._insert_head(cols + copied)
        params = [row[c] for c in cols] + [old_key[k] for k in self.table.key]
        return cur.mogrify((head + sql.SQL(" ") + select).as_string(cur), params)

    def truncate(self, cur) -> bytes:
        """TRUNCATE of the table, rendered by cur."""
        return sql.SQL("TRUNCATE {}").format(self.ident).as_string(cur).encode()

    def _row_template(self, cols: list[str]) -> str:
        # every value cast to its column's type (an array of 'infinity' strings is no date[] by itself)
        return "(" + ", ".join(f"%s::{self.types[c]}" for c in cols) + ")"

    def upsert_many(self, cur, rows: list[dict[str, Any]]) -> bytes:
        """One INSERT ... ON CONFLICT of rows (same columns, distinct keys), rendered by cur."""
        cols = list(rows[0])
        template = self._row_template(cols)
        values = b", ".join(cur.mogrify(template, [r[c] for c in cols]) for r in rows)
        return (self._insert_head(cols).as_string(cur).encode() + b" VALUES " + values + b" "
                + self._on_conflict(cols).as_string(cur).encode())

    def delete_many(self, cur, keys: list[dict[str, Any]]) -> bytes:
        """One DELETE of the rows with keys (distinct), rendered by cur."""
        key = list(self.table.key)
        template = self._row_template(key)
        values = b", ".join(cur.mogrify(template, [k[c] for c in key]) for k in keys)
        head = sql.SQL("DELETE FROM {} WHERE ({}) IN (").format(
            self.ident, sql.SQL(", ").join(map(sql.Identifier, key))).as_string(cur)
        return head.encode() + values + b")"


def create_table(table: Table) -> sql.Composed:
    """CREATE SCHEMA/TABLE IF NOT EXISTS for a set table: its captured columns and key (none for an
    unkeyed table)."""
    cols = [sql.SQL("{} {}{}").format(sql.Identifier(c.name), sql.SQL(column_type(c)),
                                      sql.SQL("" if c.nullable else " NOT NULL")) for c in table.columns]
    if table.key:
        cols.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, table.key))))
    return sql.SQL("CREATE SCHEMA IF NOT EXISTS {}; CREATE TABLE IF NOT EXISTS {}.{} ({})").format(
        sql.Identifier(table.schema), sql.Identifier(table.schema), sql.Identifier(table.name),
        sql.SQL(", ").join(cols))


def added_columns(before: Table, after: Table) -> list[Column]:
    """Columns of after that before did not have (by attnum)."""
    old = {c.attnum for c in before.columns}
    return [c for c in after.columns if c.attnum not in old]


def alter_table(before: Table, after: Table, missing: dict[int, str | None] | None = None) -> list[sql.Composed]:
    """ALTER TABLE statements taking the target from before's columns to after's.

    Columns are matched by attnum (the source's column identity): same attnum
    and another name is a RENAME, a new attnum an ADD, a missing one a DROP,
    another type an ALTER TYPE (USING a cast). A key change (other key columns;
    a key column renamed or retyped stays the same key) is refused
    (ReplicaError): rebuild the replica from a new bootstrap. missing: attnum ->
    the value (text) existing rows got from an added column's DEFAULT (the
    source's pg_attribute.attmissingval), used as the target column's default.
    """
    if [c.attnum for c in before.key_columns] != [c.attnum for c in after.key_columns]:
        raise ReplicaError(f"the key of {after.qualified} changed from ({', '.join(before.key)}) to "
                           f"({', '.join(after.key)}): re-bootstrap the replica (replicate --bootstrap copy)")
    ident = sql.SQL("ALTER TABLE {}.{} ").format(sql.Identifier(after.schema), sql.Identifier(after.name))
    old = {c.attnum: c for c in before.columns}
    new = {c.attnum: c for c in after.columns}
    out = []
    for attnum in sorted(old.keys() - new.keys()):
        out.append(ident + sql.SQL("DROP COLUMN IF EXISTS {}").format(sql.Identifier(old[attnum].name)))
    for attnum in sorted(old.keys() & new.keys()):
        a, b = old[attnum], new[attnum]
        if a.name != b.name:
            out.append(ident + sql.SQL("RENAME COLUMN {} TO {}").format(sql.Identifier(a.name),
                                                                         sql.Identifier(b.name)))
        if column_type(a) != column_type(b):
            out.append(ident + sql.SQL("ALTER COLUMN {0} TYPE {1} USING {0}::{1}").format(
                sql.Identifier(b.name), sql.SQL(column_type(b))))
    for attnum in sorted(new.keys() - old.keys()):
        c = new[attnum]
        default = (missing or {}).get(attnum)
        extra = sql.SQL("") if default is None else sql.SQL(" DEFAULT {}::{}").format(
            sql.Literal(default), sql.SQL(column_type(c)))
        out.append(ident + sql.SQL("ADD COLUMN IF NOT EXISTS {} {}{}").format(
            sql.Identifier(c.name), sql.SQL(column_type(c)), extra))
    return out
