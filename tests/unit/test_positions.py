"""Position records: which batches and events a restarted relay skips."""

import pytest

from pgshovel2 import failpoints
from pgshovel2.errors import RelayError
from pgshovel2.relay.loop import _position, _snapshot_position
from pgshovel2.relay.positions import Position


def test_complete_batch_is_covered_and_later_ones_are_not():
    pos = Position(tick=10, ordinal=42, complete=True, txid_snapshot=None)
    assert pos.covers(9) and pos.covers(10)
    assert not pos.covers(11)
    assert pos.skip(11) == 0


def test_partial_batch_resumes_after_its_committed_events():
    pos = Position(tick=10, ordinal=42, complete=False, txid_snapshot="5:9:")
    assert not pos.covers(10)
    assert pos.skip(10) == 42
    assert pos.covers(9)
    assert pos.skip(12) == 0


def test_record_round_trips():
    pos = Position(tick=7, ordinal=3, complete=False, txid_snapshot="1:2:", set_version=4)
    back = Position.decode(pos.encode())
    assert (back.tick, back.ordinal, back.complete, back.txid_snapshot, back.set_version) == (7, 3, False, "1:2:", 4)
    assert back.committed_at_ms > 0


def test_unreadable_record_is_an_error():
    with pytest.raises(RelayError, match="unreadable position record"):
        Position.decode(b'{"tick": 1}')


def test_snapshot_rows_sort_between_their_tick_and_the_next_batch():
    tick = 41
    assert _position(tick, 9_999_999_999) < _snapshot_position(tick, 0) < _snapshot_position(tick, 1)
    assert _snapshot_position(tick, 9_999_999_999) < _position(tick + 1, 0)


def test_failpoint_spec_parsing():
    assert failpoints._parse("after_commit=0.5, before_commit ,") == {"after_commit": 0.5, "before_commit": 1.0}
    assert failpoints._parse("") == {}
