"""A set read through a DBA's publication (``publication: {existing: NAME}``) passes over the
changes of tables the set does not capture (the publication may hold more); through the set's own
publication such a change is an error (someone changed it by hand). A table a set upgrade adds is
decoded from that set version on."""

import struct

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.rows import as_values
from pgshovel2.codec.textforms import converter
from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.pgoutput.decoder import Change, PgoutputDecoder, Redo, SetTable
from pgshovel2.relay.logical.relation_layout import RelationLayout
from tests.unit.pgoutput_bytes import tuple_data

SET_TABLE = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key")
OTHER = Table("s", "other", SET_TABLE.columns, ("id",), "primary key")


def _entry(table: Table) -> SetTable:
    return SetTable(table, {1: 23}, [converter(23, 0)])


def _decoder(others: bool) -> PgoutputDecoder:
    dec = PgoutputDecoder({SET_TABLE.qualified: _entry(SET_TABLE)}, others=others)
    col = b"\x00id\x00" + struct.pack(">Ii", 23, -1)
    for oid, name in ((7, b"t"), (8, b"other")):
        dec.feed(b"R" + struct.pack(">I", oid) + b"s\x00" + name + b"\x00d" + struct.pack(">H", 1) + col, 0)
    dec.feed(b"B" + struct.pack(">QqI", 0x90, 0, 5), 0)
    return dec


def _insert(oid: int, value: bytes) -> bytes:
    return b"I" + struct.pack(">I", oid) + b"N" + tuple_data((value,))


def _feed(dec: PgoutputDecoder, data: bytes) -> list:
    """Items as the source passes them on: a layout settled (LogicalTables rejects one of a table not
    in the set), then the change decoded again."""
    items = []
    for item in dec.feed(data, 0x80):
        if isinstance(item, RelationLayout):
            if item.tag not in dec.tables:
                raise RelayError(f"the layout of table {item.tag}, which is not in the set")
            dec.settle(item)
        elif isinstance(item, Redo):
            items += dec.feed(item.data, item.lsn)
        else:
            items.append(item)
    return items


def _changes(items: list) -> list[tuple[str, list]]:
    return [(i.table, as_values(i.row)) for i in items if isinstance(i, Change)]


def test_the_dbas_publication_passes_over_other_tables():
    dec = _decoder(others=True)
    assert _changes(_feed(dec, _insert(8, b"1"))) == []
    assert _changes(_feed(dec, b"T" + struct.pack(">IBI", 1, 0, 8))) == []  # its TRUNCATE too
    assert _changes(_feed(dec, _insert(7, b"2"))) == [(SET_TABLE.qualified, [2])]
    dec.update({SET_TABLE.qualified: _entry(SET_TABLE), OTHER.qualified: _entry(OTHER)})  # set upgrade adds it
    assert _changes(_feed(dec, _insert(8, b"3"))) == [(OTHER.qualified, [3])]


def test_the_sets_own_publication_refuses_other_tables():
    with pytest.raises(RelayError, match="not in the set"):
        _feed(_decoder(others=False), _insert(8, b"1"))

