"""PostgreSQL catalog introspection: resolve a set's tables, columns and keys.

Every lookup runs against the live database before anything is written, so a
bad config fails with a ConfigError naming the file, field and value.
"""

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pgshovel2 import controlsconf, names
from pgshovel2.config import SetConfig, TableConfig
from pgshovel2.controlsconf import ColumnControl
from pgshovel2.errors import ConfigError


@dataclass(frozen=True)
class Column:
    """A captured column.

    kind: the base type's name after stripping domains (``int4``, ``numeric``,
    ``timestamptz``; ``enum`` for enum types); for arrays, the element's kind.
    precision/scale: numeric type modifier, None when unconstrained.
    default: the Avro default of a column added by ALTER TABLE with a DEFAULT (the
    value PostgreSQL gives the rows that existed before, as JSON; see
    pgshovel2.relay.ddl.schema_change), else None.
    aliases: former column names (RENAME COLUMN while relayed), oldest first.
    """

    name: str
    attnum: int
    pg_type: str
    kind: str
    is_array: bool
    nullable: bool
    precision: int | None = None
    scale: int | None = None
    default: Any = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    """A table of a set, resolved against the catalog.

    columns: captured columns in attnum order; key: names of the key columns
    (empty for an unkeyed table); key_source: where the key came from.

    key_layout: the key columns as the key's schema was made from them, when a DDL changed
    them since in a way the key may not follow (a key column widened or renamed: docs/wire.rst,
    "DDL on captured tables"): the key keeps its fields, types and registered schema, so every
    key's bytes stay the same; None while the key is made from the key columns themselves.
    generation: the table's topic generation (1: ``{prefix}.{schema}.{table}``; n > 1, after
    ``pgshovel set accept-ddl --new-topic``: that topic with ``.g<n>``). renamed: the table's
    (schema, name) in the database when a RENAME TABLE or SET SCHEMA changed them while it was
    relayed; schema and name stay the ones it joined the set with -- its identity: tag, topic,
    Avro names -- and SQL reaches it by :attr:`relation`. oid: the table's pg_class OID where
    known (logical sets decode by it; a DROP TABLE is noticed by it), not part of the layout
    (ignored by ==).
    """

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    key_source: str
    key_layout: tuple[Column, ...] | None = None
    generation: int = 1
    oid: int | None = field(default=None, compare=False)
    renamed: tuple[str, str] | None = None

    @property
    def qualified(self) -> str:
        """Quoted, schema-qualified name it joined the set with: the table's tag (capture triggers,
        routes, requests); SQL on the table uses :attr:`sql_name`."""
        return names.qualified(self.schema, self.name)

    @property
    def relation(self) -> tuple[str, str]:
        """(schema, name) of the table in the database now (renamed, else its own)."""
        return self.renamed or (self.schema, self.name)

    @property
    def sql_name(self) -> str:
        """Quoted, schema-qualified name of the table in the database now (:attr:`relation`)."""
        return names.qualified(*self.relation)

    @property
    def key_columns(self) -> tuple[Column, ...]:
        """The columns the key's schema is made from, in key order: key_layout, else the key columns."""
        if self.key_layout is not None:
            return self.key_layout
        by_name = {c.name: c for c in self.columns}
        return tuple(by_name[k] for k in self.key if k in by_name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, as stored in ZooKeeper (key_layout, generation and oid only when set)."""
        data = asdict(self)
        for name, default in (("key_layout", None), ("generation", 1), ("oid", None), ("renamed", None)):
            if data[name] == default:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Table":
        """Inverse of :meth:`to_dict`."""
        layout, renamed = data.get("key_layout"), data.get("renamed")
        return cls(data["schema"], data["name"], _columns(data["columns"]), tuple(data["key"]), data["key_source"],
                   None if layout is None else _columns(layout), int(data.get("generation", 1)), data.get("oid"),
                   None if renamed is None else tuple(renamed))


def _columns(rows: list[dict[str, Any]]) -> tuple[Column, ...]:
    return tuple(Column(**{**c, "aliases": tuple(c.get("aliases", ()))}) for c in rows)


_TABLE_SQL = """
SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""

# Kept identical to the capture extension's pgshovel2.table_columns() (sql/capture), which
# the DDL event trigger uses: tests/integration/test_ddl.py checks they agree.
_COLUMNS_SQL = """
WITH RECURSIVE base(attnum, typid, typmod, depth) AS (
    SELECT a.attnum, a.atttypid, a.atttypmod, 0 FROM pg_attribute a
    WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
    SELECT b.attnum, t.typbasetype, t.typtypmod, b.depth + 1
    FROM base b JOIN pg_type t ON t.oid = b.typid WHERE t.typtype = 'd'
), resolved AS (
    SELECT DISTINCT ON (attnum) attnum, typid, typmod FROM base ORDER BY attnum, depth DESC
)
SELECT a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
       t.typname, t.typtype, t.typcategory = 'A', e.typname, e.typtype, r.typmod
FROM resolved r
JOIN pg_attribute a ON a.attrelid = %(oid)s AND a.attnum = r.attnum
JOIN pg_type t ON t.oid = r.typid
LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem
ORDER BY a.attnum
"""

# Generated columns (pg_attribute.attgenerated: 's' stored, 'v' virtual from PostgreSQL 18).
_GENERATED_SQL = """
SELECT attname, attgenerated FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated <> ''
"""

_KEY_SQL = """
SELECT i.indisprimary, i.indkey::int2[] FROM pg_index i
WHERE i.indrelid = %s AND (i.indisprimary OR i.indisreplident)
ORDER BY i.indisprimary DESC LIMIT 1
"""


def _numeric_modifier(typmod: int) -> tuple[int | None, int | None]:
    if typmod < 4:
        return None, None
    raw = typmod - 4
    return (raw >> 16) & 0xFFFF, ((raw & 0x7FF) ^ 1024) - 1024


def column_from_row(row: tuple | list) -> Column:
    """A Column from one catalog row of _COLUMNS_SQL, or of ``pgshovel2.table_columns()``
    (the capture extension's copy of that query, used in schema-change events; its
    11th element, the value pre-existing rows get for the column, is ignored here)."""
    name, attnum, pg_type, nullable, typname, typtype, is_array, elem, elemtype, typmod = row[:10]
    kind = "enum" if (elemtype if is_array else typtype) == "e" else (elem if is_array else typname)
    precision, scale = _numeric_modifier(typmod) if kind == "numeric" and not is_array else (None, None)
    return Column(name, attnum, pg_type, kind, bool(is_array), nullable, precision, scale)


def resolve_table(cur, tc: TableConfig, where: str, source: str, stored_generated: bool = True,
                  notes: list[str] | None = None) -> Table:
    """Resolve one configured table with cursor cur; where: e.g. ``tables[0]``.

    Generated columns the set cannot carry are left out (:func:`uncarried_generated`), each
    with a line appended to notes. Raises ConfigError for a missing table or column, a
    column listed in ``columns`` or ``key`` that is left out, or an unkeyed table without
    ``allow_unkeyed``. Key columns are always captured.
    """
    cur.execute(_TABLE_SQL, (tc.schema, tc.name))
    found = cur.fetchone()
    if found is None or found[1] not in ("r", "p"):
        raise ConfigError(source, f"{where}.name", tc.name,
                          f"no table {names.qualified(tc.schema, tc.name)} in the database")
    oid = found[0]
    cur.execute(_COLUMNS_SQL, {"oid": oid})
    all_columns = [column_from_row(r) for r in cur.fetchall()]
    by_name = {c.name: c for c in all_columns}
    left_out = uncarried_generated(cur, oid, stored_generated)
    for field_name, wanted in (("columns", tc.columns), ("key", tc.key)):
        for i, col in enumerate(wanted or ()):
            if col not in by_name:
                raise ConfigError(source, f"{where}.{field_name}[{i}]", col,
                                  f"no column {names.quote_ident(col)} in table "
                                  f"{names.qualified(tc.schema, tc.name)}")
            if col in left_out:
                raise ConfigError(source, f"{where}.{field_name}[{i}]", col,
                                  f"column {names.quote_ident(col)} of {names.qualified(tc.schema, tc.name)} "
                                  f"cannot be captured: {left_out[col]}")
    key, key_source = _key(cur, oid, tc, all_columns)
    for col in key:
        if col in left_out:
            raise ConfigError(source, f"{where}.name", tc.name,
                              f"key column {names.quote_ident(col)} of {names.qualified(tc.schema, tc.name)} "
                              f"cannot be captured: {left_out[col]}")
    for name, why in left_out.items():
        if notes is not None and tc.columns is None:
            notes.append(f"column {names.quote_ident(name)} of {names.qualified(tc.schema, tc.name)} "
                         f"left out: {why}")
    all_columns = [c for c in all_columns if c.name not in left_out]
    by_name = {c.name: c for c in all_columns}
    if not key and not tc.allow_unkeyed:
        raise ConfigError(source, f"{where}.name", tc.name,
                          f"table {names.qualified(tc.schema, tc.name)} has no primary key or "
                          "replica identity index; declare 'key' or set 'allow_unkeyed: true'")
    _check_controls(tc, key, by_name, where, source)
    wanted_cols = (set(tc.columns or by_name) - controlsconf.excluded(tc.controls)) | set(key)
    columns = tuple(c for c in all_columns if c.name in wanted_cols)
    return Table(tc.schema, tc.name, columns, key, key_source, oid=oid)




TRUNCATABLE = ("text", "varchar", "bpchar", "bytea", "citext")  # column kinds oversized truncate may cut
CONTROL_TRUNCATABLE = tuple(k for k in TRUNCATABLE if k != "bytea")  # a truncate control cuts characters


def all_column_tags(config: SetConfig, tables: tuple[Table, ...]) -> frozenset[str]:
    """Tags of tables (resolved from config) whose config captures every column, also those added
    later (TableConfig.all_columns)."""
    modes = {(tc.schema, tc.name): tc.all_columns for tc in config.tables}
    return frozenset(t.qualified for t in tables if modes.get((t.schema, t.name), False))


def _check_controls(tc: TableConfig, key: tuple[str, ...], by_name: dict[str, Column], where: str,
                    source: str) -> None:
    """Raise ConfigError for a control (config.controls) on a column the table does not have (or
    does not capture), exclude, mask or truncate on a key column, truncate on a column that is not
    text, varchar, char or citext (or is an array)."""
    for control in tc.controls:
        field_name, col = f"{where}.controls.{control.column}", by_name.get(control.column)
        table = names.qualified(tc.schema, tc.name)
        if col is None or (tc.columns is not None and col.name not in tc.columns and col.name not in key):
            raise ConfigError(source, field_name, control.column,
                              f"table {table} has no captured column {names.quote_ident(control.column)}")
        if control.action != "hash" and col.name in key:
            raise ConfigError(source, field_name, control.action,
                              f"column {names.quote_ident(col.name)} is in the key of {table}: only hash may "
                              "control a key column (a key must stay a key)")
        if control.action == "truncate" and (col.kind not in CONTROL_TRUNCATABLE or col.is_array):
            raise ConfigError(source, field_name, control.action,
                              f"column {names.quote_ident(col.name)} of {table} is {col.pg_type}: truncate cuts "
                              "text, varchar, char and citext values only")


def column_index(table: Table) -> dict[str, int]:
    """Column name -> its index in table.columns, by its name now and by its former names
    (Column.aliases: a RENAME COLUMN while relayed); a name now comes before another's former name."""
    index = {alias: i for i, c in enumerate(table.columns) for alias in c.aliases}
    index.update({c.name: i for i, c in enumerate(table.columns)})
    return index


def wire_table(table: Table, controls: tuple[ColumnControl, ...]) -> Table:
    """table as its messages carry it under its column controls (config controls): a masked or
    hashed column is ``text`` (nullable as before; an added column's Avro default left out, as no
    string default follows from the original type's), in the key layout too; table itself without one."""
    index = column_index(table)
    retyped = {index[c.column] for c in controls if c.action in ("mask", "hash") and c.column in index}
    if not retyped:
        return table
    names_ = {table.columns[i].name for i in retyped}
    layout = None if table.key_layout is None else tuple(_as_text(c) if c.name in names_ else c
                                                          for c in table.key_layout)
    return replace(table, columns=tuple(_as_text(c) if i in retyped else c for i, c in enumerate(table.columns)),
                   key_layout=layout)


def _as_text(column: Column) -> Column:
    return replace(column, pg_type="text", kind="text", is_array=False, precision=None, scale=None, default=None)


def uncarried_generated(cur, oid: int, stored_generated: bool) -> dict[str, str]:
    """Generated columns of table oid that are not captured, by name, with the reason.

    A virtual generated column (PostgreSQL 18) has no stored value: the WAL does not carry it
    and a capture trigger sees NULL, so no path can relay it. A stored one is left out only
    when stored_generated is false (pgoutput before PostgreSQL 18 does not send generated
    columns); the trigger backend and our decoder carry it.
    """
    cur.execute(_GENERATED_SQL, (oid,))
    out = {}
    for name, kind in cur.fetchall():
        if kind == "v":
            out[name] = ("a virtual generated column has no stored value (the WAL does not hold it and a "
                         "capture trigger sees NULL); capture the columns it is computed from")
        elif not stored_generated:
            out[name] = ("a stored generated column, which pgoutput sends only from PostgreSQL 18 on; use "
                         "backend: trigger, or decoder: pgshovel2 where the server has it")
    return out


def _key(cur, oid: int, tc: TableConfig, columns: list[Column]) -> tuple[tuple[str, ...], str]:
    if tc.key:
        return tc.key, "config"
    cur.execute(_KEY_SQL, (oid,))
    row = cur.fetchone()
    if row is None:
        return (), "none"
    by_attnum = {c.attnum: c.name for c in columns}
    source = "primary key" if row[0] else "replica identity index"
    return tuple(by_attnum[a] for a in row[1]), source


def raise_all(problems: list[ConfigError], source: str) -> None:
    """Raise the one problem, or one ConfigError listing them all; nothing when there is none."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        lines = "".join(f"\n  {p.field}: {str(p).split(': ', 2)[-1]}" for p in problems)
        raise ConfigError(source, ", ".join(p.field for p in problems), [p.value for p in problems],
                          f"{len(problems)} problems:{lines}\n")


def resolve_set(conn, set_name: str, config: SetConfig, source: str, stored_generated: bool = True,
                notes: list[str] | None = None) -> tuple[Table, ...]:
    """Resolve every table of a set config against the database of conn.

    stored_generated, notes: as :func:`resolve_table`. Also checks that escaped topic and
    Avro field names do not collide and fit Kafka's limits. Raises ConfigError naming every
    bad table at once; reads only.
    """
    resolved, problems = [], []
    with conn.cursor() as cur:
        for i, tc in enumerate(config.tables):
            try:
                resolved.append(resolve_table(cur, tc, f"tables[{i}]", source, stored_generated, notes))
            except ConfigError as exc:
                problems.append(exc)
    raise_all(problems, source)
    tables = tuple(resolved)
    prefix = config.topic_prefix or set_name
    topics: dict[str, str] = {names.transactions_topic(prefix): "the transactions topic",
                              names.positions_topic(prefix): "the positions topic"}
    if config.oversized.policy == "dead-letter":
        topics[names.dead_letter_topic(prefix)] = "the dead-letter topic"
    for i, table in enumerate(tables):
        topic = names.table_topic(prefix, table.schema, table.name)
        if len(topic) > names.MAX_TOPIC_LENGTH:
            raise ConfigError(source, f"tables[{i}].name", table.name,
                              f"topic name {topic!r} is longer than {names.MAX_TOPIC_LENGTH}")
        if topic in topics:
            raise ConfigError(source, f"tables[{i}].name", table.name,
                              f"topic {topic!r} collides with {topics[topic]}")
        topics[topic] = table.qualified
        fields: dict[str, str] = {}
        for col in table.columns:
            avro = names.avro_name(col.name)
            if avro in fields:
                raise ConfigError(source, f"tables[{i}].columns", col.name,
                                  f"Avro field name {avro!r} collides with column {fields[avro]!r}")
            fields[avro] = col.name
    _check_truncatable(tables, config.oversized.columns, source)
    return tables




def _check_truncatable(tables: tuple[Table, ...], columns: tuple[str, ...], source: str) -> None:
    """Every column oversized.columns names is a text, varchar, char, citext or bytea column (not
    an array, not a key column) of some table of the set. Raises ConfigError naming the first that is not."""
    for i, name in enumerate(columns):
        found = [(t, c) for t in tables for c in t.columns if c.name == name]
        if not found:
            raise ConfigError(source, f"oversized.columns[{i}]", name, "no table of the set has this column")
        for table, col in found:
            if col.kind not in TRUNCATABLE or col.is_array or name in table.key:
                raise ConfigError(source, f"oversized.columns[{i}]", name,
                                  f"column {name!r} of {table.qualified} is {col.pg_type}"
                                  + (" (a key column)" if name in table.key else "")
                                  + ": only text, varchar, char, citext and bytea columns outside the key can be cut")
