"""pgshovel2.rows messages (rows a TRUNCATE, ATTACH or DETACH of a partition moved) read through
pgoutput: a message of the set's slot about one of its tables gives the table's rows, its columns
picked by name from the partition's (any order) and converted as pgoutput's values are."""

import json

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import textforms
from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.pgoutput.relations import SetTable
from pgshovel2.relay.logical.pgoutput.rows import rows

TABLE = Table("s", "orders", (Column("id", 1, "integer", "int4", False, False),
                              Column("day", 3, "date", "date", False, False),
                              Column("note", 4, "text", "text", False, True)), ("id", "day"), "primary key")
TABLES = {TABLE.qualified: SetTable(TABLE, {1: 23, 3: 1082, 4: 25},
                                    [textforms.converter(23, 0), textforms.converter(1082, 0),
                                     textforms.converter(25, 0)])}


def message(**fields) -> bytes:
    msg = {"slot": "slot1", "op": "D", "table": ["s", "orders"], "partition": ["s", "orders_2024"],
           "columns": ["note", "day", "id"], "rows": [["a", "2000-01-02", "7"], [None, "2000-01-01", "8"]], **fields}
    return json.dumps(msg).encode()


def test_rows_in_the_tables_column_order():
    assert rows(message(), "slot1", TABLES) == ("D", '"s"."orders"', [[7, 1, "a"], [8, 0, None]])
    assert rows(message(op="I"), "slot1", TABLES)[0] == "I"


def test_other_slots_and_tables_are_not_the_sets():
    assert rows(message(), "slot2", TABLES) is None
    assert rows(message(table=["s", "other"]), "slot1", TABLES) is None


def test_our_plugins_messages_are_another_sets():
    """A set of our decoder capturing the same table writes its rows in sql/decoder/rows.c's form,
    which every slot decodes too: not this set's, and no error."""
    assert rows(b"pgshovel2_other_1a2b\nD\n16384\n16390\n1,2\n[7,1]", "slot1", TABLES) is None


def test_a_column_the_partition_lacks():
    """A non-key column of the set's layout no longer in the table: None; a key column: an error."""
    got = rows(message(columns=["x", "day", "id"]), "slot1", TABLES)
    assert got[2] == [[7, 1, None], [8, 0, None]]
    with pytest.raises(RelayError, match=r'the rows of "s"."orders_2024" .* lack key column \'id\''):
        rows(message(columns=["note", "day", "x"]), "slot1", TABLES)


@pytest.mark.parametrize("bad", [b"{", json.dumps({"slot": "slot1"}).encode(), message(op="U")])
def test_malformed_messages_are_named(bad):
    with pytest.raises(RelayError, match="malformed pgshovel2.rows message on slot slot1"):
        rows(bad, "slot1", TABLES)
