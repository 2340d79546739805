"""pgshovel.unchanged in the shipped consumers' pure parts: the consumer library's Change and
RowState (previous values kept, a key update carries them over, a re-insert resets them), tail's
JSON line, and the materialize job's header parsing."""

import json

import pytest

from pgshovel2 import names
from pgshovel2.consumer import Change, RowState, Transaction
from pgshovel2.consumer.errors import ConsumerError
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
    with pytest.raises(ConsumerError, match="UPDATE of the key"):
        unchanged_columns({"pgshovel.unchanged": '["big"]'}, "c", "m")
