"""pgoutput's message formats, parsed from bytes built as the protocol documentation lays them out."""

import struct

import pytest

from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.pgoutput import messages as pm
from tests.unit.pgoutput_bytes import tuple_data


def _tuple(*values) -> bytes:
    """TupleData of values, text given as str."""
    return tuple_data([v.encode() if isinstance(v, str) else v for v in values])


def test_a_relation_gives_its_oid_names_and_columns_in_order():
    cols = [("id", 20, -1), ("näme", 1043, 68)]
    body = b"".join(b"\x01" + name.encode() + b"\0" + struct.pack(">Ii", oid, mod) for name, oid, mod in cols)
    data = b"R" + struct.pack(">I", 16384) + "schéma".encode() + b"\0" + b"t\0" + b"d" + struct.pack(">H", 2) + body
    assert pm.relation(data) == (16384, "schéma", "t", cols)


def test_tuple_data_gives_text_null_and_unchanged_and_the_position_after_it():
    data = b"xx" + _tuple("1", None, ..., "é") + b"rest"
    values, pos = pm.tuple_data(data, 2)
    assert values == ["1", None, ..., "é"]
    assert data[pos:] == b"rest"


def test_a_binary_column_value_is_refused_by_name():
    data = struct.pack(">H", 1) + b"b" + struct.pack(">I", 1) + b"\x01"
    with pytest.raises(RelayError, match="kind 'b'"):
        pm.tuple_data(data, 0)


@pytest.mark.parametrize("kind, body, expected", [
    (b"I", b"N" + _tuple("1", "a"), (None, False, ["1", "a"])),
    (b"U", b"K" + _tuple("1", None) + b"N" + _tuple("2", ...), (["1", None], False, ["2", ...])),
    (b"U", b"O" + _tuple("1", "a") + b"N" + _tuple("1", "b"), (["1", "a"], True, ["1", "b"])),
    (b"U", b"N" + _tuple("1", "b"), (None, False, ["1", "b"])),
    (b"D", b"K" + _tuple("1", None), (["1", None], False, None)),
    (b"D", b"O" + _tuple("1", "a"), (["1", "a"], True, None)),
])
def test_a_change_gives_its_old_tuple_whether_it_is_the_whole_row_and_its_new_tuple(kind, body, expected):
    assert pm.change_tuples(kind, kind + struct.pack(">I", 16384) + body, "public.t") == expected


def test_an_update_without_its_new_tuple_is_refused_naming_the_table():
    with pytest.raises(RelayError, match="U message of public.t without its new row"):
        pm.change_tuples(b"U", b"U" + struct.pack(">I", 1) + b"K" + _tuple("1"), "public.t")


@pytest.mark.parametrize("flags, transactional", [(0, False), (1, True)])
def test_a_logical_message_gives_whether_it_is_transactional_its_lsn_prefix_and_content(flags, transactional):
    content = b'{"version": 3}'
    data = b"M" + bytes([flags]) + struct.pack(">Q", 0x16B3748) + pm.VERSION_PREFIX + b"\0" + \
        struct.pack(">I", len(content)) + content
    got_transactional, lsn, prefix, start = pm.logical_message(data)
    assert (got_transactional, lsn, prefix, data[start:]) == (transactional, 0x16B3748, pm.VERSION_PREFIX, content)


def test_a_truncate_gives_the_oids_it_truncates():
    data = b"T" + struct.pack(">I", 3) + b"\x01" + struct.pack(">III", 16384, 16390, 17001)
    assert pm.truncated(data) == [16384, 16390, 17001]


def test_begin_and_commit_fields_follow_the_kind_byte():
    begin = b"B" + struct.pack(">QqI", 0x1000, 123, 77)
    commit = b"C" + struct.pack(">BQQq", 0, 0x1000, 0x1010, 123)
    assert pm.BEGIN_FIELDS.unpack_from(begin, 1) == (0x1000, 123, 77)
    assert pm.COMMIT_FIELDS.unpack_from(commit, 1) == (0, 0x1000, 0x1010, 123)
