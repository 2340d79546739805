"""A table's layout as a logical decoder reports it, turned into a schema-change payload.

Both decoders report a table's columns before its first change in a session and before its
first change after an ALTER TABLE: pgoutput's Relation message (names, type OIDs, typmods;
all published columns), our plugin's layout record ``R`` (sql/decoder/layout.c: exactly the
captured columns, with attnums, NOT NULL and the value pre-existing rows get). The logical
source turns a layout that differs from the one in effect into the same ``S`` control event
the trigger backend's event trigger writes (:mod:`pgshovel2.relay.ddl.schema_change`), so DDL is
relayed by one set of rules, at the change's exact place in the stream.

pgoutput does not send attnums, nullability or missing values: they are read from the live
catalog by the relation's OID and column name, else taken from the table in effect (see
:func:`_with_attnums` for a column changed again by a later ALTER TABLE).
"""

import json
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from pgshovel2.catalog import Table, all_column_tags, column_from_row
from pgshovel2.codec.textforms import converter
from pgshovel2.names import qualified
from pgshovel2.relay.source import SCHEMA_CHANGE, Control
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import Lsn


class LayoutColumn(NamedTuple):
    """One column of a reported layout; attnum, notnull, missing None: not reported (pgoutput)."""

    name: str
    type_oid: int
    typmod: int
    attnum: int | None = None
    notnull: bool | None = None
    missing: str | None = None


class RelationLayout(NamedTuple):
    """A table's layout from the stream (not an item of the loop: the source resolves it).
    tag: the set's table tag; oid: the relation; schema, name: its names now; captured: the
    columns are exactly the captured ones (our plugin), else every published column.
    txid, ts_ms, unit, ordinal: where in the stream (the next change's place), as a Change's."""

    tag: str
    oid: int | None
    schema: str
    name: str
    columns: tuple[LayoutColumn, ...]
    captured: bool
    txid: int = 0
    ts_ms: int = 0
    unit: int = 0
    ordinal: int = 0

    def at(self, txid: int, ts_ms: int, unit: int, ordinal: int) -> "RelationLayout":
        """This layout placed in the stream."""
        return self._replace(txid=txid, ts_ms=ts_ms, unit=unit, ordinal=ordinal)


class Redo(NamedTuple):
    """A pgoutput message to decode again once the layout before it is settled."""

    data: bytes
    lsn: int


_H, _I, _col = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">HIiBB")


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8"), end + 1


def parse_record(data: bytes, tags: list[str]) -> RelationLayout:
    """Our plugin's layout record (``R``, sql/decoder/README.rst) -> RelationLayout."""
    (index,) = _H.unpack_from(data, 1)
    schema, pos = _cstring(data, 3)
    name, pos = _cstring(data, pos)
    (n,) = _H.unpack_from(data, pos)
    pos += 2
    columns = []
    for _ in range(n):
        attnum, type_oid, typmod, notnull, has_missing = _col.unpack_from(data, pos)
        col, pos = _cstring(data, pos + _col.size)
        missing = None
        if has_missing:
            missing, pos = _cstring(data, pos)
        columns.append(LayoutColumn(col, type_oid, typmod, attnum, bool(notnull), missing))
    return RelationLayout(tags[index], None, schema, name, tuple(columns), True)


_TYPES_SQL = """
WITH RECURSIVE u(i, typid, typmod) AS (
    SELECT i::int, t, m FROM unnest(%(oids)s::oid[], %(mods)s::int4[]) WITH ORDINALITY x(t, m, i)
), base(i, typid, typmod, depth) AS (
    SELECT i, typid, typmod, 0 FROM u
  UNION ALL
    SELECT b.i, t.typbasetype, t.typtypmod, b.depth + 1 FROM base b JOIN pg_type t ON t.oid = b.typid
    WHERE t.typtype = 'd'
), resolved AS (
    SELECT DISTINCT ON (i) i, typid, typmod FROM base ORDER BY i, depth DESC
)
SELECT r.i, format_type(u.typid, u.typmod), t.typname, t.typtype, t.typcategory = 'A', e.typname, e.typtype,
       r.typmod, r.typid::int8,
       CASE WHEN t.typsubscript = 'array_subscript_handler'::regproc THEN t.typelem::int8 ELSE 0 END, t.typlen
FROM resolved r JOIN u ON u.i = r.i JOIN pg_type t ON t.oid = r.typid
LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem
ORDER BY r.i
"""

_ATTRS_SQL = """
SELECT attname, attnum, atttypid::int8, attnotnull, CASE WHEN atthasmissing THEN (to_json(attmissingval) -> 0)::text END
FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped
"""


class Resolved(NamedTuple):
    """A layout resolved against the catalog: payload (the ``S`` event's, see
    :mod:`pgshovel2.relay.ddl.schema_change`), type_oids (attnum -> type OID), converters
    (attnum -> text -> capture form, for pgoutput)."""

    payload: dict[str, Any]
    type_oids: dict[int, int]
    converters: dict[int, Callable[[str], Any]]


def resolve(cur, layout: RelationLayout, current: Table, mode_all: bool, before_partial: bool = False) -> Resolved:
    """The captured layout that layout gives current (the table in effect): mode_all takes
    every column, else current's columns still there. before_partial (envelope debezium): a
    NOT NULL column the layout adds to a table whose replica identity is not FULL is nullable
    whatever its length (a DELETE's ``before`` holds the identity's columns only; the rule of
    pgshovel2.backends.logical.unlogged_nullable at set create). Raises RelayError when
    pgoutput's layout cannot be matched with the catalog (module docstring)."""
    columns = layout.columns if layout.captured else _with_attnums(cur, layout, current)
    if not layout.captured and not mode_all:
        kept = {c.attnum for c in current.columns}
        columns = tuple(c for c in columns if c.attnum in kept)
    cur.execute(_TYPES_SQL, {"oids": [c.type_oid for c in columns], "mods": [c.typmod for c in columns]})
    types = {r[0]: r[1:] for r in cur.fetchall()}
    rows, type_oids, converters = [], {}, {}
    unlogged = _unlogged_nullable(cur, layout)
    for i, c in enumerate(columns, 1):
        pg_type, typname, typtype, is_array, elem, elemtype, typmod, base_oid, elem_oid, typlen = types[i]
        missing = _missing(c.missing, typname) if layout.captured else c.missing
        nullable = not c.notnull or (unlogged and (typlen == -1 or before_partial)
                                     and c.attnum not in current_attnums(current))
        rows.append([c.name, c.attnum, pg_type, nullable, typname, typtype, is_array, elem, elemtype,
                     typmod, missing])
        type_oids[c.attnum] = c.type_oid
        converters[c.attnum] = converter(base_oid, elem_oid)
    attnums = {c.name: c.attnum for c in current.columns}
    present = {c.attnum for c in columns}
    key = [attnums[k] for k in current.key if attnums.get(k) in present]
    payload = {"schema": layout.schema, "name": layout.name, "dropped": False, "columns": rows, "key": key}
    return Resolved(payload, type_oids, converters)


def current_attnums(current: Table) -> frozenset[int]:
    """The attnums of current's captured columns."""
    return frozenset(c.attnum for c in current.columns)


def _unlogged_nullable(cur, layout: RelationLayout) -> bool:
    """Whether a NOT NULL variable-length column that layout adds to the table gets a nullable
    field: the table's replica identity is not FULL, so an UPDATE may leave its value unchanged
    and unlogged (pgshovel2.backends.logical.unlogged_nullable, the same rule at set create)."""
    if layout.oid is not None:
        cur.execute("SELECT relreplident <> 'f' FROM pg_class WHERE oid = %s", (layout.oid,))
    else:
        cur.execute("SELECT relreplident <> 'f' FROM pg_class WHERE oid = to_regclass(%s)",
                    (qualified(layout.schema, layout.name),))
    row = cur.fetchone()
    return bool(row and row[0])


def _missing(text: str | None, typname: str) -> Any:
    """The plugin's missing-value text in the JSON form the event trigger reports."""
    if text is None or typname != "bool":
        return text
    return text == "t"


def _with_attnums(cur, layout: RelationLayout, current: Table) -> tuple[LayoutColumn, ...]:
    """pgoutput's columns with attnum, NOT NULL and missing value: from the catalog (by name and
    type), else from the table in effect (a column renamed or dropped since: same name), else a
    column added and changed again since: nullable, with the next unused attnum (its values
    are picked by name; only a later rename of it would look like drop and add)."""
    cur.execute(_ATTRS_SQL, (layout.oid,))
    attrs = {r[0]: r for r in cur.fetchall()}
    known = {c.name: c for c in current.columns}
    used = {c.attnum for c in current.columns} | {r[1] for r in attrs.values()}
    out = []
    for c in layout.columns:
        attr = attrs.get(c.name)
        if attr is not None and attr[2] == c.type_oid:
            missing = None if attr[4] is None else json.loads(attr[4])
            out.append(c._replace(attnum=attr[1], notnull=attr[3], missing=missing))
        elif c.name in known:
            out.append(c._replace(attnum=known[c.name].attnum, notnull=not known[c.name].nullable))
        else:
            attnum = max(used, default=0) + 1
            used.add(attnum)
            out.append(c._replace(attnum=attnum, notnull=False))
    return tuple(out)


def differs(current: Table, payload: dict[str, Any]) -> bool:
    """Whether payload's captured layout differs from current's (what a schema change looks at:
    names, attnums, types, nullability, the table's name)."""
    if (payload["schema"], payload["name"]) != current.relation:
        return True
    new = [column_from_row(r) for r in payload["columns"]]
    if len(new) != len(current.columns):
        return True
    for a, b in zip(current.columns, new, strict=True):
        if (a.name, a.attnum, a.pg_type, a.kind, a.is_array) != (b.name, b.attnum, b.pg_type, b.kind, b.is_array):
            return True
        if b.nullable and not a.nullable:
            return True
    return False


def to_control(resolved: Resolved, layout: RelationLayout, current: Table) -> Control | None:
    """The ``S`` control event that switches current to the resolved layout at the layout's
    place; None when the captured layout is the one in effect. Logical decoding does not see
    the DDL statement: the event names the table and where the new layout was first used."""
    if not differs(current, resolved.payload):
        return None
    statement = (f"ALTER TABLE {layout.tag} (statement not in the WAL; the new layout is first used by change "
                 f"{layout.ordinal} of the transaction with commit LSN {Lsn(layout.unit)})")
    return Control(layout.txid, layout.ts_ms, SCHEMA_CHANGE, resolved.payload, layout.tag, statement, layout.unit,
                   layout.ordinal)


def all_mode_tags(record: SetRecord) -> frozenset[str]:
    """Tags of the record's tables configured without a column list (mode all: added columns are
    captured)."""
    return all_column_tags(record.config, record.tables)
