"""A pgoutput Relation mapped onto a table of the set, and its rows decoded by Python; no I/O.

:func:`map_relation` checks that a Relation message still holds every column of the set's table
with its type, and picks them out; :func:`python_rows` decodes a change's TupleData with the
table's converters (rows as lists) when the native decoder (:func:`native_rows`,
native/src/pgoutput.rs) is off or leaves the change to Python.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgshovel2.catalog import Table
from pgshovel2.codec import native, textforms
from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.pgoutput.messages import change_tuples


@dataclass
class SetTable:
    """A table of the set as the decoder needs it: tag, columns, their type OIDs and converters."""

    table: Table
    type_oids: dict[int, int]
    converters: list[Callable[[str], Any]]


@dataclass
class MappedRelation:
    """A relation mapped onto a set table. The native scan (native/src/stream/scan.rs) reads its
    ``native``, ``index`` and ``tag`` by name."""

    tag: str
    picks: list[int]                       # index in the relation's columns of each set column
    converters: list[Callable[[str], Any]]
    native: Any = None                     # pgshovel2_native.PgoutputRows of the relation, or None
    index: int = 0                         # the table's index in PgoutputDecoder.tags


def native_rows(picks: list[int], converters: list[Callable[[str], Any]]) -> Any:
    """The native decoder of a relation's rows (native/src/pgoutput.rs), or None when the native
    module is off or absent or too old to have it."""
    rows = getattr(native.module(), "PgoutputRows", None)
    return None if rows is None else rows(picks, [textforms.native_form(c) for c in converters])


def map_relation(entry: SetTable | None, tag: str, columns: dict[str, tuple[int, int]], slot: str,
                 index: int) -> MappedRelation:
    """The mapping of relation tag (columns: name -> (position, type OID), from its Relation
    message) onto entry, the set's table of that tag (None: not in the set); index: the table's
    index in the decoder's tags. Raises RelayError naming the table and column when a column of
    the set is gone or changed its type, or the table is not in the set."""
    if entry is None:
        raise RelayError(f"slot {slot} sent changes of table {tag}, which is not in the set "
                         "(its publication was changed by hand?)")
    picks = []
    for col in entry.table.columns:
        found = columns.get(col.name)
        if found is None or found[1] != entry.type_oids.get(col.attnum):
            what = "is not in it any more" if found is None else "changed its type"
            raise RelayError(f"table {tag}: column {col.name!r} {what} (a DDL statement the logical backend "
                             "with decoder pgoutput does not relay yet): nothing after it was relayed; "
                             "re-create the set for the new layout")
        picks.append(found[0])
    return MappedRelation(tag, picks, entry.converters, native_rows(picks, entry.converters), index)


def tuple_row(rel: MappedRelation, values: list, old: list | None, full: bool = False) -> tuple[list, tuple]:
    """(row, unchanged positions) of a TupleData. An unchanged TOASTed value ('u') is taken
    from old when old holds it: a full old row (full: REPLICA IDENTITY FULL, 'O') or a key
    tuple ('K') for its key columns, which PostgreSQL logs even when unchanged if stored out
    of line. Otherwise the value is None and its position is listed as unchanged."""
    row, unchanged = [], []
    for i, (pick, conv) in enumerate(zip(rel.picks, rel.converters, strict=True)):
        text = values[pick]
        if text is ...:
            known = old[pick] if old is not None else None
            if known is ... or (known is None and not full):
                unchanged.append(i)
                row.append(None)
                continue
            text = known
        row.append(None if text is None else conv(text))
    return row, tuple(unchanged)


def old_row(rel: MappedRelation, old: list, table: Table) -> list:
    """The old row of an update or delete (table: the set's table of rel). Raises RelayError when
    a value is missing from it (PostgreSQL flattens old rows: never seen)."""
    row, unchanged = tuple_row(rel, old, None)
    if unchanged:
        raise RelayError(f"table {rel.tag}, column {table.columns[unchanged[0]].name!r}: pgoutput sent an old "
                         "row without its value")
    return row


def python_rows(rel: MappedRelation, kind: bytes, data: bytes, table: Table,
                subset: bool) -> tuple[Any, Any, tuple] | None:
    """(row, before, unchanged positions) of change message data (kind I, U or D) of rel by the
    Python converters (rows as lists); None for an update of a subset table (subset: captured
    in part) that changes none of its columns, for which the capture trigger writes no event."""
    old, full, new = change_tuples(kind, data, rel.tag)
    row, unchanged = tuple_row(rel, new, old, full) if new is not None else (None, ())
    before = old_row(rel, old, table) if old is not None else None
    if kind == b"D":
        row, before = before, None
    if kind == b"U" and before is not None and before == row and subset:
        return None
    return row, before, unchanged
