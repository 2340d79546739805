"""Skip requests as the relay reads them (pgshovel2.relay.skips): a streamed change by its position,
a row of an initial snapshot by its table and key, at whatever position a later snapshot gives it."""

from pgshovel2.relay.skips import Skips, is_snapshot_position

ROW = {"table": '"public"."t"', "key": '{"id": 1}'}


def test_requests_match_positions_and_snapshot_rows():
    record = {"requested": {
        "00000000000000000007:0000000003": {"reason": "r", "by": "me", "at": 0},
        "0000000001DF964F:s0000000000": {"reason": "r", "by": "me", "at": 0, **ROW},
    }}
    skips = Skips.of(record, lambda p, w: None, lambda p, w: None)
    assert skips.asked("00000000000000000007:0000000003", {"table": "x", "key": "y"})
    assert not skips.asked("00000000000000000007:0000000004", ROW)  # a streamed change: its position only
    assert skips.asked("0000000001E00E47:s0000000005", ROW)  # the row in the next snapshot
    assert not skips.asked("0000000001E00E47:s0000000005", {**ROW, "key": '{"id": 2}'})
    assert not Skips().asked("0000000001E00E47:s0000000005", ROW)


def test_snapshot_positions():
    assert is_snapshot_position("0000000001E00E47:s0000000005")
    assert is_snapshot_position("00000000000000000001:s0000000000")
    assert not is_snapshot_position("00000000000000000001:0000000000")
    assert not is_snapshot_position("nonsense")
