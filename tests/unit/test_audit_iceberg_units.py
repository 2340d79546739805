"""The Iceberg audit's pieces that need no service: which keys are in flight (messages after the
Iceberg snapshot's offsets that the source's snapshot includes), the recorded offsets it reads, and
the report line that counts keys in flight."""

import pytest

from pgshovel2 import wire
from pgshovel2.catalog import Column, Table
from pgshovel2.ops.audit import AuditError, TableDrift, report
from pgshovel2.ops.audit_iceberg import IcebergState, _offsets, in_flight
from pgshovel2.ops.audit_kafka import AuditPoint
from pgshovel2.txids import TxidSnapshot

POINT = AuditPoint(TxidSnapshot.parse("100:110:103"), logical=False, row_bound=42)


def _msg(key: int | None, txid: int, unit: int = 40) -> tuple:
    return (None if key is None else str(key).encode(), b"v",
            {wire.TXID: str(txid), wire.POSITION: wire.change_header(wire.TRIGGER, unit, 0)})


def test_keys_of_changes_the_point_includes_are_in_flight():
    messages = [_msg(1, 101), _msg(2, 103), _msg(3, 109), _msg(4, 120), _msg(1, 104), _msg(None, 101)]
    assert in_flight(messages, POINT, lambda key: (int(key),)) == {(1,), (3,)}


def test_snapshot_rows_after_the_offsets_are_in_flight_up_to_the_bound():
    rows = [(b"5", b"v", {wire.TXID: "0", wire.POSITION: wire.snapshot_header(wire.TRIGGER, unit, 0)})
            for unit in (42, 43)]
    assert in_flight(rows, POINT, lambda key: (int(key),)) == {(5,)}


def test_recorded_offsets_are_read_or_named_unreadable():
    table = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key")
    assert _offsets('{"a.s.t": {"0": 5, "1": 0}, "a.txns": {"0": 9}}', table) == {
        ("a.s.t", 0): 5, ("a.s.t", 1): 0, ("a.txns", 0): 9}
    for bad in ("[1, 2]", '{"a": {"x": 1}}', "not json"):
        with pytest.raises(AuditError, match='s"?."?t'):
            _offsets(bad, table)


def test_a_state_without_offsets_says_it_is_not_at_one_position():
    assert "not at one position" in IcebergState(7, {}, None, "3").describe()
    assert IcebergState(7, {}, {}, "3").describe() == "Iceberg snapshot 7 (micro-batch 3)"


def test_the_report_counts_keys_in_flight():
    lines = report([TableDrift("s.t", 10, 1, 1, [(4,)], "here", in_flight=2), TableDrift("s.u", 3, 1, 0, [])])
    assert lines == ["s.t at here: 10 rows, 1 buckets, 1 differing, 1 differing key(s), 2 key(s) in flight "
                     "not compared", "  differs: s.t key [4]",
                     "s.u: 3 rows, 1 buckets, 0 differing, 0 differing key(s)"]
