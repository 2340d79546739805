"""pgshovel2.sparkjobs.carry on hand-made change rows (local Spark, no stack): unlogged values
come from the key's earlier rows, or at an UPDATE of the key from the old key's row before its
delete (read past the batch's end when it is not in it), through chains, never across a
delete; a value found nowhere stops with an error."""

import pytest

from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.sparkjobs import carry
from pgshovel2.sparkjobs.changes import OFFSET, OP, POSITION, UNCHANGED

NAMES = ["id", "n", "big"]
SCHEMA = f"id int, n int, big string, {OP} string, {POSITION} string, {OFFSET} long, {UNCHANGED} array<string>"


def _p(i: int) -> str:
    return f"{i:016X}:0000000000"


def _frame(spark, rows):
    return spark.createDataFrame(rows, SCHEMA).persist()


def _after(frame) -> dict:
    """(id, position) -> (op, n, big, keep flags) of every change row after fill."""
    out = {}
    for r in frame.collect():
        out[(r["id"], r[POSITION])] = (r[OP], r["n"], r["big"], tuple(r[f"{carry.KEEP}{i}"] for i in range(3)))
    return out


def test_moves_chains_and_deletes(spark):
    rows = [
        (1, 0, "A", "c", _p(1), 0, []),
        (1, 1, None, "u", _p(2), 1, ["big"]),          # keeps A
        (1, None, None, "d", _p(3), 2, []),            # 1 -> 2
        (2, 2, None, "c", _p(3), 0, ["big"]),
        (2, None, None, "d", _p(4), 1, []),            # 2 -> 3: a chain
        (3, 3, None, "c", _p(4), 0, ["big"]),
        (3, 4, None, "u", _p(5), 1, ["big"]),
        (9, 0, "OLD", "c", _p(1), 0, []),              # 9 deleted, then 8 moved onto it
        (9, None, None, "d", _p(6), 1, []),
        (8, 0, "EIGHT", "c", _p(1), 0, []),
        (8, None, None, "d", _p(7), 1, []),
        (9, 5, None, "c", _p(7), 2, ["big"]),
    ]
    got = _after(carry.fill(_frame(spark, rows), ["id"], NAMES))
    assert got[(1, _p(2))][1:3] == (1, "A")
    assert got[(2, _p(3))][1:3] == (2, "A")
    assert got[(3, _p(4))][1:3] == (3, "A") and got[(3, _p(5))][1:3] == (4, "A")
    assert got[(9, _p(7))][1:3] == (5, "EIGHT")  # not the old 9's value
    assert all(not any(keep) for _, _, _, keep in got.values())
    assert len(got) == len(rows)  # no carried row left in


def test_values_before_the_batch(spark):
    """A key's UPDATE with no earlier row keeps the state's value (KEEP); a move's old key found only
    in the base (Parquet) or lent (Iceberg) gives its value."""
    changes = _frame(spark, [(5, 1, None, "u", _p(2), 0, ["big"]),
                             (6, None, None, "d", _p(3), 0, []), (60, 6, None, "c", _p(3), 1, ["big"])])
    alone = _after(carry.fill(changes.filter("id = 5"), ["id"], NAMES))
    assert alone[(5, _p(2))][3] == (False, False, True)
    base = _frame(spark, [(6, 0, "SIX", "r", "", -1, []), (5, 0, "FIVE", "r", "", -1, [])])
    with_base = _after(carry.fill(changes, ["id"], NAMES, base=base))
    assert with_base[(60, _p(3))][1:3] == (6, "SIX") and with_base[(5, _p(2))][1:3] == (1, "FIVE")
    assert (6, "") in with_base  # base rows stand with the changes

    def lenders(olds):
        assert sorted(r["id"] for r in olds.collect()) == [6]
        return base.filter("id = 6")
    lent = _after(carry.fill(changes, ["id"], NAMES, lenders=lenders))
    assert lent[(60, _p(3))][1:3] == (6, "SIX") and (6, "") not in lent


def test_a_move_without_its_old_value_stops(spark):
    alone = _frame(spark, [(60, 6, None, "c", _p(3), 1, ["big"])])  # its delete is not in the batch
    with pytest.raises(ConsumerError, match=r"position 0000000000000003:0000000000 left columns \['big'\]"):
        carry.fill(alone, ["id"], NAMES)
    unseen = _frame(spark, [(6, None, None, "d", _p(3), 0, []), (60, 6, None, "c", _p(3), 1, ["big"])])
    with pytest.raises(ConsumerError, match="REPLICA IDENTITY FULL"):
        carry.fill(unseen, ["id"], NAMES)


def test_a_delete_past_the_batch_end_is_read(spark):
    """The old key's delete is past the batch's end (its commit marker was not visible yet): read
    there (beyond), with the old key's value lent by the table; those rows only lend."""
    alone = _frame(spark, [(60, 6, None, "c", _p(3), 1, ["big"])])
    after = _frame(spark, [(6, 7, None, "u", _p(2), 5, ["big"]), (6, None, None, "d", _p(3), 6, []),
                           (60, 8, "LATER", "u", _p(4), 2, [])])
    table = _frame(spark, [(6, 0, "SIX", "r", "", -1, [])])
    got = _after(carry.fill(alone, ["id"], NAMES, lenders=lambda olds: table.join(olds, "id", "left_semi"),
                            beyond=lambda: after))
    assert got == {(60, _p(3)): ("c", 6, "SIX", (False, False, False))}
