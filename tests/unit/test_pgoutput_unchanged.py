"""pgoutput's unchanged TOASTed values ('u'): taken from a full old row or the old key when
it has them, else null and listed in Change.unchanged; never a wrong value (a key-only old row
is not the row's old values). Each test runs with the native decoder and with the Python one."""

import struct

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.rows import as_values
from pgshovel2.codec.textforms import converter
from pgshovel2.relay.logical.pgoutput import relations as pgoutput_relations
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder, Redo, SetTable
from pgshovel2.relay.logical.relation_layout import RelationLayout
from tests.unit.pgoutput_bytes import tuple_data

TABLE = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),
                         Column("n", 2, "integer", "int4", False, True),
                         Column("v", 3, "text", "text", False, True)), ("id",), "primary key")


@pytest.fixture(autouse=True, params=["native", "python"])
def _path(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(pgoutput_relations, "native_rows", lambda *_: None)


def _decoder() -> PgoutputDecoder:
    convs = [converter(23, 0), converter(23, 0), converter(25, 0)]
    dec = PgoutputDecoder({TABLE.qualified: SetTable(TABLE, {1: 23, 2: 23, 3: 25}, convs)})
    cols = b"".join(b"\x00" + name + b"\x00" + struct.pack(">Ii", oid, -1)
                    for name, oid in ((b"id", 23), (b"n", 23), (b"v", 25)))
    dec.feed(b"R" + struct.pack(">I", 7) + b"s\x00t\x00d" + struct.pack(">H", 3) + cols, 0)
    dec.feed(b"B" + struct.pack(">QqI", 0x90, 0, 5), 0)
    return dec


def _tuple(*values) -> bytes:
    return tuple_data(values)


def _update(old_kind: bytes = b"", old: bytes = b"", new: bytes = b"") -> bytes:
    return b"U" + struct.pack(">I", 7) + old_kind + old + b"N" + new


def _feed(dec: PgoutputDecoder, data: bytes) -> list:
    """The items of a change as the source passes them on: the relation's first layout settled
    (as the loop does before the change), then the change decoded again."""
    items = []
    for item in dec.feed(data, 0x80):
        if isinstance(item, RelationLayout):
            dec.settle(item)
        elif isinstance(item, Redo):
            items += dec.feed(item.data, item.lsn)
        else:
            items.append(item)
    return items


def test_unchanged_without_old_row_is_null_and_listed():
    begin, change = _feed(_decoder(), _update(new=_tuple(b"1", b"2", ...)))
    assert (as_values(change.row), change.unchanged) == ([1, 2, None], (2,))


def test_key_only_old_row_does_not_give_its_nulls_as_values():
    (change,) = _feed(_decoder(), _update(b"K", _tuple(b"0", None, None), _tuple(b"1", b"2", ...)))[1:]
    assert (as_values(change.row), as_values(change.before), change.unchanged) == ([1, 2, None], [0, None, None], (2,))


def test_full_old_row_gives_the_value():
    (change,) = _feed(_decoder(), _update(b"O", _tuple(b"1", b"1", b"big"), _tuple(b"1", b"2", ...)))[1:]
    assert (as_values(change.row), change.unchanged) == ([1, 2, "big"], ())


def test_key_value_from_the_old_key():
    (change,) = _feed(_decoder(), _update(b"K", _tuple(b"1", None, None), _tuple(..., b"2", b"x")))[1:]
    assert (as_values(change.row), change.unchanged) == ([1, 2, "x"], ())
