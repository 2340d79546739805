"""Unkeyed tables in the shipped consumers' pure parts (issue #66): the consumer library's RowState
keeps them as a multiset (duplicate rows, one of two equal rows deleted or updated, TRUNCATE, both
envelopes), and ``set verify``'s rebuild counts what the relay's envelopes write for them."""

import json
from collections import Counter

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.consumer import Change, RowState, Transaction
from pgshovel2.ops import verify
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, TxnOrder

LOG = Table("s", "log", (Column("msg", 1, "text", "text", False, True), Column("n", 2, "integer", "int4", False, True)),
            (), "none")


def _c(op, value, position, unchanged=()):
    return Change("p.s.log", "s.log", op, None, value, 1, position, 0, 0, 0, 0, frozenset(unchanged))


def _event(op, before, after):
    return {"before": before, "after": after, "source": {"table": "log"}, "op": op}


A, B, C = {"msg": "a", "n": 1}, {"msg": "b", "n": 2}, {"msg": "c", "n": 3}

# the same history in both envelopes: a, a, b inserted; one a deleted; one a updated to c (one of
# two equal rows: a second a was inserted again first); b updated to b (no-op update)
ROW_HISTORY = [_c("c", A, "1"), _c("c", A, "2"), _c("c", B, "3"), _c("d", A, "4"), _c("c", A, "5"),
               _c("d", A, "6"), _c("u", C, "6"), _c("d", B, "7"), _c("u", B, "7")]
DEBEZIUM_HISTORY = [_c("c", _event("c", None, A), "1"), _c("c", _event("c", None, A), "2"),
                    _c("r", _event("r", None, B), "3"), _c("d", _event("d", A, None), "4"),
                    _c("c", _event("c", None, A), "5"), _c("u", _event("u", A, C), "6"),
                    _c("u", _event("u", B, B), "7")]


@pytest.mark.parametrize("history", [ROW_HISTORY, DEBEZIUM_HISTORY], ids=["row", "debezium"])
def test_row_state_keeps_an_unkeyed_table_as_a_multiset(history):
    state = RowState()
    state.apply_all([Transaction(1, "1", 0, history)])
    rows = state.tables["s.log"]
    assert sorted(map(json.dumps, rows.values())) == sorted(map(json.dumps, [A, C, B]))
    assert all(isinstance(k, int) for k in rows) and len(set(rows)) == 3  # a synthetic key per occurrence
    state.apply(_c("d", _event("d", C, None) if history is DEBEZIUM_HISTORY else C, "8"))
    state.apply(_c("d", _event("d", C, None) if history is DEBEZIUM_HISTORY else C, "9"))  # no second c: nothing
    assert sorted(map(json.dumps, rows.values())) == sorted(map(json.dumps, [A, B]))
    state.apply(Change("p.s.log", "s.log", "t", None, None, 1, "10", 0, 0, 0))
    assert state.tables["s.log"] == {}
    state.apply(_c("c", A if history is ROW_HISTORY else _event("c", None, A), "11"))
    state.apply(_c("d", A if history is ROW_HISTORY else _event("d", A, None), "12"))
    assert state.tables["s.log"] == {}  # the multiset was emptied with the rows


def test_row_state_removes_an_equal_row_with_nan():
    state = RowState()
    nan = {"msg": "x", "f": float("nan")}
    state.apply_all([Transaction(1, "1", 0, [_c("c", dict(nan), "1"), _c("c", dict(nan), "2"),
                                             _c("d", dict(nan), "3")])])
    assert len(state.tables["s.log"]) == 1


def test_row_state_refuses_an_unkeyed_change_with_unchanged_columns():
    with pytest.raises(ValueError, match="previous value is not known"):
        RowState().apply(_c("u", {"msg": None, "n": 1}, "1", ["msg"]))


def _row_envelope(use_avro: bool) -> RowEnvelope:
    writer = AvroWriter(avro.value_schema("myset", LOG), 9) if use_avro else None
    return RowEnvelope(RowEncoder(LOG, use_avro, None, writer))


def _debezium(use_avro: bool) -> DebeziumEnvelope:
    writer = AvroWriter(avro.debezium_value_schema("myset", LOG), 7) if use_avro else None
    return DebeziumEnvelope(RowEncoder(LOG, use_avro, None, None), SourceInfo("myset", "db", "s", "log"), "t",
                            writer, lambda: 0)


@pytest.mark.parametrize("envelope", [_row_envelope, _debezium], ids=["row", "debezium"])
@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_verify_rebuilds_what_the_relay_writes_for_an_unkeyed_table(envelope, use_avro):
    env = envelope(use_avro)
    ctx = Context(7, "p", 0, order=TxnOrder())
    changes = [("I", ["a", 1], None), ("I", ["a", 1], None), ("I", ["b", 2], None), ("D", ["a", 1], None),
               ("U", ["c", 3], ["a", 1]), ("U", ["b", 2], ["b", 2]), ("I", ["d", None], None)]
    messages = [(m.key, m.value, {"pgshovel.op": m.op, "pgshovel.position": f"{i:04d}"})
                for i, (op, row, before) in enumerate(changes) for m in env.change(op, row, before, ctx)]
    messages.append((None, env.read(["e", 5], ctx)[0].value, {"pgshovel.op": "r", "pgshovel.position": "0000"}))
    _, rebuilt = verify.rebuilt_rows(verify.rebuild(messages, "", env))
    image = lambda row: env.row_image(env.encoder.convert(row))  # noqa: E731
    assert +rebuilt == Counter([image(["c", 3]), image(["b", 2]), image(["d", None]), image(["e", 5])])
    assert all(n >= 0 for n in rebuilt.values())
    _, after_truncate = verify.rebuilt_rows(verify.rebuild(messages, "0005~", env))  # a TRUNCATE after 0005
    assert after_truncate == Counter([image(["d", None])])
