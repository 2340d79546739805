"""pgshovel.unchanged in the shipped consumers' pure parts: the consumer library's Change and
RowState (previous values kept, a key update carries them over, a re-insert resets them), tail's
JSON line, and the materialize job's header parsing."""

import json

import pytest

from pgshovel2 import names
from pgshovel2.consumer import Change, RowState, Transaction
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.consumer.model import TxnRecord
from pgshovel2.consumer.render import change_json
from pgshovel2.sparkjobs.changes import unchanged_columns


def _c(op, key, value, position, unchanged=()):
    return Change("p.s.t", "s.t", op, key and {"id": key}, value, 1, position, 0, 0, 0, 0, frozenset(unchanged))


def test_row_state_keeps_previous_values_and_never_a_stale_one():
    state = RowState()
    state.apply_all([Transaction(1, "1", 0, [
        _c("c", 1, {"id": 1, "n": 0, "big": "A"}, "1"),
        _c("u", 1, {"id": 1, "n": 1, "big": None}, "2", ["big"]),
        _c("d", 1, None, "3"),
        _c("c", 1, {"id": 1, "n": 2, "big": "B"}, "4"),           # re-insert: a new value
        _c("u", 1, {"id": 1, "n": 3, "big": None}, "5", ["big"]),
        _c("d", 1, None, "6"), _c("c", 2, {"id": 2, "n": 4, "big": None}, "6", ["big"]),  # key update
        _c("u", 2, {"id": 2, "n": 5, "big": None}, "7", ["big"]),
    ])])
    assert state.tables["s.t"] == {(("id", 2),): {"id": 2, "n": 5, "big": "B"}}


def test_unknown_previous_value_is_an_error_not_a_null():
    with pytest.raises(ValueError, match="previous value is not known"):
        RowState().apply(_c("u", 1, {"id": 1, "big": None}, "1", ["big"]))


def test_avro_field_names_and_debezium_after():
    field = names.avro_name("n.x")  # Avro values name fields by the escaped column name
    change = _c("u", 1, {"id": 1, field: None}, "1", ["n.x"])
    assert change.fill_unchanged({"id": 1, field: 7}) == {"id": 1, field: 7}
    event = _c("u", 1, {"before": None, "after": {"id": 1, "big": None}, "source": {}, "op": "u"}, "1", ["big"])
    assert event.fill_unchanged({"id": 1, "big": "A"})["after"] == {"id": 1, "big": "A"}


def test_tail_json_lists_unchanged():
    line = json.loads(change_json(_c("u", 1, {"id": 1, "big": None}, "1", ["big"])))
    assert line["unchanged"] == ["big"] and line["value"]["big"] is None
    assert "unchanged" not in json.loads(change_json(_c("u", 1, {"id": 1}, "1")))


def test_materialize_reads_the_header():
    assert unchanged_columns({}, "u", "m") == []
    assert unchanged_columns({"pgshovel.unchanged": '["big","t"]'}, "u", "m") == ["big", "t"]
    with pytest.raises(ConsumerError, match="malformed"):
        unchanged_columns({"pgshovel.unchanged": '{"big": 1}'}, "u", "m")
    assert unchanged_columns({"pgshovel.unchanged": '["big"]'}, "c", "m") == ["big"]  # an UPDATE of the key
    with pytest.raises(ConsumerError, match="op 'd'"):
        unchanged_columns({"pgshovel.unchanged": '["big"]'}, "d", "m")


def _mark(kind, position, topic="p.s.t"):
    return TxnRecord(kind, 0, position, 0, 0, 0, table=topic)


def test_row_state_keeps_a_partial_update_incomplete_during_an_online_snapshot():
    """A consumer started at SNAPSHOT_BEGIN: an UPDATE with unchanged values of a key not seen yet
    waits for the key's op r row (or a change with every value); outside the snapshot (and for a
    key still incomplete at SNAPSHOT_END) it is the error it always was."""
    marks = [_mark("SNAPSHOT_BEGIN", "5:s0000000000")]
    state = RowState()
    state.apply_all([Transaction(0, "5:s0000000000", 0, [_c("r", 1, {"id": 1, "n": 0, "big": "A"}, "5:s0000000000")],
                                 snapshot=True),
                     Transaction(1, "6:1", 0, [_c("u", 2, {"id": 2, "n": 1, "big": None}, "6:1", ["big"]),
                                               _c("u", 3, {"id": 3, "n": 1, "big": None}, "6:2", ["big"]),
                                               _c("u", 4, {"id": 4, "n": 1, "big": None}, "6:3", ["big"]),
                                               _c("u", 4, {"id": 4, "n": 2, "big": "D"}, "6:4"),
                                               _c("u", 5, {"id": 5, "n": 1, "big": None}, "6:5", ["big"]),
                                               _c("d", 5, None, "6:6")])], marks)
    assert state.tables["s.t"] == {(("id", 1),): {"id": 1, "n": 0, "big": "A"},
                                   (("id", 4),): {"id": 4, "n": 2, "big": "D"}}
    assert set(state.incomplete["p.s.t"]) == {(("id", 2),), (("id", 3),)}
    marks.append(_mark("SNAPSHOT_END", "7:s0000000002"))  # the reader read on: the list grows
    state.apply_all([Transaction(0, "7:s0000000000", 0, [_c("r", 2, {"id": 2, "n": 1, "big": "B"}, "7:s0000000000"),
                                                         _c("r", 3, {"id": 3, "n": 1, "big": "C"}, "7:s0000000001")],
                                 snapshot=True),
                     Transaction(2, "8:1", 0, [_c("u", 2, {"id": 2, "n": 9, "big": None}, "8:1", ["big"])])], marks)
    assert state.tables["s.t"][(("id", 2),)] == {"id": 2, "n": 9, "big": "B"}
    assert state.tables["s.t"][(("id", 3),)] == {"id": 3, "n": 1, "big": "C"} and not state.incomplete
    with pytest.raises(ValueError, match="previous value is not known"):  # after SNAPSHOT_END: as always
        state.apply(_c("u", 9, {"id": 9, "big": None}, "9:1", ["big"]))


def test_row_state_incomplete_key_at_snapshot_end_is_an_error():
    marks = [_mark("SNAPSHOT_BEGIN", "5:s0000000000"), _mark("SNAPSHOT_END", "7:s0000000001")]
    state = RowState()
    state.apply_all([Transaction(1, "6:1", 0, [_c("u", 3, {"id": 3, "n": 1, "big": None}, "6:1", ["big"])]),
                     Transaction(0, "7:s0000000000", 0, [_c("r", 1, {"id": 1, "n": 0, "big": "A"}, "7:s0000000000")],
                                 snapshot=True)], marks)
    assert (("id", 3),) in state.incomplete["p.s.t"]
    with pytest.raises(ValueError, match=r"previous value is not known.*end of the table's online snapshot"):
        state.apply_marks(marks)  # caught up: the END applies
    with pytest.raises(ValueError, match="previous value is not known"):  # no snapshot in progress now
        state.apply(_c("u", 9, {"id": 9, "big": None}, "8:1", ["big"]))
