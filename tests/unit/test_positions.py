"""Position records: which batches and events a restarted relay skips."""

import pytest

from pgshovel2 import failpoints
from pgshovel2.errors import RelayError
from pgshovel2.wire import (
    LOGICAL,
    TRIGGER,
    Lsn,
    Position,
    change_header,
    parse_header,
    position_prefix,
    snapshot_header,
)


def test_complete_unit_is_covered_and_later_ones_are_not():
    pos = Position(unit=10, ordinal=42, complete=True)
    assert pos.reaches(9, 0, True) and pos.reaches(10, 0, True) and pos.covers(10, 10**6)
    assert not pos.reaches(11, 0, True) and not pos.covers(11, 0)


def test_partial_unit_covers_its_committed_events_only():
    pos = Position(unit=10, ordinal=42, complete=False, txid_snapshot="5:9:")
    assert not pos.reaches(10, 0, True)
    assert pos.covers(10, 41) and not pos.covers(10, 42)
    assert pos.reaches(10, 42, False) and not pos.reaches(10, 43, False)
    assert pos.reaches(9, 0, True) and not pos.reaches(12, 0, False)


def test_record_round_trips_and_keeps_the_tick_field():
    pos = Position(unit=7, ordinal=3, complete=False, txid_snapshot="1:2:", set_version=4)
    data = pos.encode()
    assert b'"tick": 7' in data  # records written before LSNs named the unit so
    back = Position.decode(data)
    assert (back.unit, back.ordinal, back.complete, back.txid_snapshot, back.set_version) == (7, 3, False, "1:2:", 4)
    assert back.committed_at_ms > 0


def test_unreadable_record_is_an_error():
    with pytest.raises(RelayError, match="unreadable position record"):
        Position.decode(b'{"tick": 1}')


def test_snapshot_rows_sort_between_their_tick_and_the_next_batch():
    tick = 41
    assert change_header(TRIGGER, tick, 9_999_999_999) < snapshot_header(TRIGGER, tick, 0) \
        < snapshot_header(TRIGGER, tick, 1)
    assert snapshot_header(TRIGGER, tick, 9_999_999_999) < change_header(TRIGGER, tick + 1, 0)
    assert parse_header(snapshot_header(TRIGGER, tick, 7)) == (TRIGGER, tick, True, 7)


def test_a_logical_handoff_leaves_a_transaction_committed_at_the_consistent_point_to_the_stream():
    point = Lsn.parse("0/8AD3120")  # a commit record can start right where the slot became consistent
    handoff = Position.at_consistent_point(point)
    assert not handoff.reaches(point, 0, True) and not handoff.covers(point, 0)
    assert handoff.reaches(point - 24, 0, True) and handoff.covers(point - 24, 10**6)
    # its snapshot rows sort between the transactions the copy holds and those the stream brings
    rows = snapshot_header(LOGICAL, handoff.unit, 0), snapshot_header(LOGICAL, handoff.unit, 9_999_999_999)
    assert change_header(LOGICAL, point - 24, 9_999_999_999) < rows[0] < rows[1] < change_header(LOGICAL, point, 0)
    assert handoff.describe() == "the slot's consistent point 0/8AD3120"


def test_position_describes_itself_for_operators():
    assert Position(123, 0, True).describe() == "tick 123"
    assert Position(Lsn.parse("16/B374D848"), 5, False, backend=LOGICAL).describe() == \
        "commit LSN 16/B374D848, first 5 events"


def test_failpoint_spec_parsing():
    assert failpoints._parse("after_commit=0.5, before_commit ,") == {"after_commit": 0.5, "before_commit": 1.0}
    assert failpoints._parse("") == {}
    assert failpoints._parse("online_chunk_read=pause:/tmp/x") == {"online_chunk_read": "/tmp/x"}


def test_online_snapshot_progress_round_trips_and_older_records_have_none():
    progress = {"id": "abc", "table": '"public"."t"', "last_key": ["42"], "chunk": 3, "rows": 300, "done": False}
    back = Position.decode(Position(unit=7, ordinal=0, complete=True, snapshot=progress).encode())
    assert back.snapshot == progress
    old = b'{"tick": 7, "ordinal": 0, "complete": true, "txid_snapshot": null, "backend": "trigger"}'
    assert Position.decode(old).snapshot is None


@pytest.mark.parametrize("backend", [TRIGGER, LOGICAL])
@pytest.mark.parametrize("unit", [0, 1, 41, 0x16B374D848, 2**64 - 1])
def test_position_prefix_is_change_headers_start(backend, unit):
    for ordinal in (0, 7, 9_999_999_999):
        assert position_prefix(backend, unit) + f"{ordinal:010d}" == change_header(backend, unit, ordinal)
