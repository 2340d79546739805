"""The reassembly state machine fed message data shaped like the relay's
(pgshovel2.relay.emit.emitter): no Kafka involved, so every ordering case can be
built exactly."""

import pytest

from pgshovel2.consumer import DataMessage, OrderError, Reassembler, SetTopics, TableTopic, TxnRecord
from pgshovel2.consumer.errors import ConsumerError

A, B, C = "p.public.a", "p.public.b", "p.public.c"
TXN = "p.transactions"
TOPICS = SetTopics("p", "json", TXN, (TableTopic("public", "a", A), TableTopic("public", "b", B),
                                      TableTopic("public", "c", C)))
PARTS = {A: 2, B: 1, C: 1}


def pos(tick: int, ordinal: int) -> str:
    return f"{tick:020d}:{ordinal:010d}"


class Log:
    """Builds messages with increasing offsets per partition, like a Kafka log."""

    def __init__(self):
        self.offsets: dict[tuple[str, int], int] = {}

    def _next(self, topic: str, part: int) -> int:
        off = self.offsets.get((topic, part), 0)
        self.offsets[(topic, part)] = off + 1
        return off

    def data(self, topic: str, part: int, op: str, txid: int, position: str, key: int) -> DataMessage:
        value = None if op == "d" else {"id": key}
        return DataMessage(topic, part, self._next(topic, part), op, txid, position, 1000, {"id": key}, value)

    def begin(self, txid: int, position: str) -> TxnRecord:
        return TxnRecord("BEGIN", txid, position, 1000, 0, self._next(TXN, 0))

    def end(self, txid: int, position: str, counts: dict[str, int]) -> TxnRecord:
        return TxnRecord("END", txid, position, 1000, 0, self._next(TXN, 0), sum(counts.values()), counts)

    def truncate(self, txid: int, position: str, topic: str) -> TxnRecord:
        return TxnRecord("TRUNCATE", txid, position, 1000, 0, self._next(TXN, 0), table=topic)


def feed(r: Reassembler, *items) -> list:
    for item in items:
        if isinstance(item, TxnRecord):
            r.add_record(item)
        else:
            r.add_data(item)
    return list(r.ready())


def ops(txn) -> list[tuple]:
    return [(c.op, c.table, c.key and c.key["id"]) for c in txn.changes]


def strict(**kw) -> Reassembler:
    return Reassembler(TOPICS, PARTS, drop_orphans=False, **kw)


def test_multi_topic_transaction_waits_for_every_count_and_orders_by_position():
    r, log = strict(), Log()
    # txid 10: insert a1 (part 0), key update of b: d b1 + c b2 (one position), update a3 (part 1)
    begin = log.begin(10, pos(5, 0))
    a1 = log.data(A, 0, "c", 10, pos(5, 0), 1)
    b_del = log.data(B, 0, "d", 10, pos(5, 1), 1)
    b_new = log.data(B, 0, "c", 10, pos(5, 1), 2)
    a3 = log.data(A, 1, "u", 10, pos(5, 2), 3)
    end = log.end(10, pos(5, 2), {A: 2, B: 2})
    assert feed(r, begin, end, a3) == []          # END read first: data still missing
    assert r.missing().counts == {A: 1, B: 2}
    assert feed(r, b_del) == []
    assert r.missing().counts == {A: 1, B: 1}
    assert feed(r, b_new) == []
    [txn] = feed(r, a1)
    assert (txn.txid, txn.position, txn.snapshot) == (10, pos(5, 0), False)
    assert ops(txn) == [("c", "public.a", 1), ("d", "public.b", 1), ("c", "public.b", 2), ("u", "public.a", 3)]
    assert r.idle and r.missing() is None


def test_key_update_tombstone_precedes_create_across_partitions():
    r, log = strict(), Log()
    create = log.data(A, 0, "c", 7, pos(1, 0), 2)   # new key, partition 0
    tomb = log.data(A, 1, "d", 7, pos(1, 0), 1)     # old key, partition 1, same position
    [txn] = feed(r, log.begin(7, pos(1, 0)), create, tomb, log.end(7, pos(1, 0), {A: 2}))
    assert ops(txn) == [("d", "public.a", 1), ("c", "public.a", 2)]


def test_truncate_is_a_change_in_position_order():
    r, log = strict(), Log()
    items = [log.begin(3, pos(2, 0)), log.data(C, 0, "c", 3, pos(2, 0), 1), log.truncate(3, pos(2, 1), C),
             log.data(C, 0, "c", 3, pos(2, 2), 2), log.end(3, pos(2, 2), {C: 2})]
    [txn] = feed(r, *items)
    assert [(c.op, c.key) for c in txn.changes] == [("c", {"id": 1}), ("t", None), ("c", {"id": 2})]
    assert txn.changes[1].topic == C and txn.changes[1].table == "public.c"


def test_transactions_come_out_in_transactions_topic_order():
    r, log = strict(), Log()
    first = [log.begin(1, pos(1, 0)), log.data(A, 0, "c", 1, pos(1, 0), 1), log.end(1, pos(1, 0), {A: 1})]
    second = [log.begin(2, pos(1, 1)), log.data(B, 0, "c", 2, pos(1, 1), 5), log.end(2, pos(1, 1), {B: 1})]
    # the second transaction's data is visible before the first's
    out = feed(r, first[0], first[2], second[0], second[2], second[1])
    assert out == []
    out = feed(r, first[1])
    assert [t.txid for t in out] == [1, 2]


def test_snapshot_rows_yielded_at_once_in_bounded_chunks():
    r, log = strict(snapshot_chunk=2), Log()
    rows = [log.data(A, 0, "r", 0, pos(0, i), i) for i in range(5)]
    out = feed(r, *rows)
    assert [len(t.changes) for t in out] == [2, 2, 1]
    assert all(t.snapshot and t.txid == 0 for t in out)
    assert [c.key["id"] for t in out for c in t.changes] == [0, 1, 2, 3, 4]
    assert out[0].position == pos(0, 0) and out[1].position == pos(0, 2)


def test_snapshot_rows_before_stream_data_in_a_partition():
    r, log = strict(), Log()
    snap = log.data(A, 0, "r", 0, pos(0, 0), 1)
    upd = log.data(A, 0, "u", 9, pos(3, 0), 1)
    out = feed(r, snap, upd, log.begin(9, pos(3, 0)), log.end(9, pos(3, 0), {A: 1}))
    assert [(t.snapshot, t.txid) for t in out] == [(True, 0), (False, 9)]


def test_message_beyond_end_count_is_an_order_error():
    r, log = strict(), Log()
    feed(r, log.begin(4, pos(1, 0)), log.data(A, 0, "c", 4, pos(1, 0), 1), log.end(4, pos(1, 1), {A: 1}))
    extra = log.data(A, 0, "c", 4, pos(1, 1), 2)
    with pytest.raises(OrderError, match="beyond the END count of txid 4") as err:
        feed(r, extra)
    assert (err.value.topic, err.value.partition, err.value.offset, err.value.txid) == (A, 0, 1, 4)
    assert err.value.position == pos(1, 1)


def test_extra_message_of_open_transaction_after_end_is_an_order_error():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="beyond the END count 0"):
        feed(r, log.begin(4, pos(1, 0)), log.end(4, pos(1, 1), {A: 1}), log.data(B, 0, "c", 4, pos(1, 0), 1))


def test_data_taken_before_end_beyond_its_count_is_an_order_error():
    r, log = strict(), Log()
    feed(r, log.begin(4, pos(1, 0)), log.data(A, 0, "c", 4, pos(1, 0), 1), log.data(A, 0, "c", 4, pos(1, 1), 2))
    with pytest.raises(OrderError, match="beyond the END count 1") as err:
        feed(r, log.end(4, pos(1, 1), {A: 1}))
    assert err.value.offset == 1


def test_message_of_no_transaction_is_an_order_error():
    r, log = strict(), Log()
    stray = log.data(A, 0, "c", 99, pos(1, 0), 1)  # before the BEGIN of txid 5, no transaction of its own
    with pytest.raises(OrderError, match="no open transaction") as err:
        feed(r, log.begin(5, pos(1, 1)), stray)
    assert (err.value.txid, err.value.offset) == (99, 0)


def test_message_inside_another_transactions_positions_is_an_order_error():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="inside txid 5"):
        feed(r, log.begin(5, pos(1, 0)), log.end(5, pos(1, 3), {A: 1}), log.data(A, 1, "c", 6, pos(1, 2), 1))


def test_position_going_back_in_a_partition_is_an_order_error_equal_is_allowed():
    r, log = strict(), Log()
    r.add_data(log.data(A, 0, "d", 5, pos(2, 1), 1))
    r.add_data(log.data(A, 0, "c", 5, pos(2, 1), 2))   # same position: a key update
    r.add_data(log.data(A, 1, "c", 5, pos(1, 0), 3))   # other partition: independent
    with pytest.raises(OrderError, match="position went back") as err:
        r.add_data(log.data(A, 0, "c", 5, pos(2, 0), 4))
    assert (err.value.partition, err.value.offset) == (0, 2)


def test_snapshot_row_rules():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="txid 0"):
        feed(r, log.data(A, 0, "c", 0, pos(0, 0), 1))
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="snapshot read"):
        feed(r, log.data(A, 0, "r", 8, pos(0, 0), 1))


def test_end_without_begin_is_an_order_error_when_reading_from_the_beginning():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="END record without a BEGIN") as err:
        feed(r, log.end(4, pos(1, 0), {A: 1}))
    assert err.value.topic == TXN


def test_orphans_before_the_first_begin_are_dropped_when_starting_late():
    r, log = Reassembler(TOPICS, PARTS, drop_orphans=True), Log()
    orphan_by_txid = log.data(A, 0, "c", 3, pos(1, 5), 1)   # its END is read before any BEGIN
    orphan_by_pos = log.data(B, 0, "c", 2, pos(1, 1), 2)    # position before the first BEGIN
    kept = log.data(A, 0, "c", 4, pos(2, 0), 3)
    out = feed(r, log.truncate(3, pos(1, 4), A), log.end(3, pos(1, 5), {A: 1}), orphan_by_txid, orphan_by_pos,
               log.begin(4, pos(2, 0)), kept, log.end(4, pos(2, 0), {A: 1}))
    assert [ops(t) for t in out] == [[("c", "public.a", 3)]]
    assert r.orphans_dropped == 2


def test_same_data_without_drop_orphans_is_an_order_error():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="before the BEGIN of txid 4"):
        feed(r, log.data(B, 0, "c", 2, pos(1, 1), 2), log.begin(4, pos(2, 0)))


def test_transaction_that_can_never_complete_is_detected():
    r, log = strict(), Log()
    later = log.data(B, 0, "c", 6, pos(3, 0), 1)
    with pytest.raises(OrderError, match="can never complete: 1 message"):
        feed(r, log.begin(5, pos(2, 0)), log.end(5, pos(2, 0), {B: 1}), later)


def test_missing_data_while_a_partition_is_empty_only_waits():
    r, log = strict(), Log()
    # topic a has two partitions: one is past the END, the other may still bring the message
    feed(r, log.begin(5, pos(2, 0)), log.end(5, pos(2, 0), {A: 1}), log.data(A, 0, "c", 6, pos(3, 0), 1))
    assert r.missing().counts == {A: 1} and r.missing().txid == 5


def test_begin_before_previous_end_is_an_order_error():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="BEGIN before the END of txid 1"):
        feed(r, log.begin(1, pos(1, 0)), log.begin(2, pos(1, 1)))


def test_end_count_sum_must_match_event_count():
    r, log = strict(), Log()
    bad = TxnRecord("END", 1, pos(1, 0), 0, 0, 1, 3, {A: 1})
    with pytest.raises(OrderError, match="event_count 3"):
        feed(r, log.begin(1, pos(1, 0)), bad)


def test_table_selection_ignores_other_tables():
    only_a = TOPICS.select(["public.a"])
    r, log = Reassembler(only_a, {A: 2}, drop_orphans=False), Log()
    out = feed(r, log.begin(1, pos(1, 0)), log.truncate(1, pos(1, 0), B), log.data(A, 0, "c", 1, pos(1, 1), 1),
               log.end(1, pos(1, 2), {A: 1, B: 1}),
               log.begin(2, pos(2, 0)), log.end(2, pos(2, 0), {C: 1}))    # nothing in a: not yielded
    assert [ops(t) for t in out] == [[("c", "public.a", 1)]]
    assert r.idle


def test_end_naming_a_topic_outside_the_set_is_an_error():
    r, log = strict(), Log()
    with pytest.raises(OrderError, match="not a table of set 'p'"):
        feed(r, log.begin(1, pos(1, 0)), log.end(1, pos(1, 0), {"p.public.new": 1}))


def test_select_tables():
    assert [t.topic for t in TOPICS.select(["b", "public.a"]).tables] == [B, A]
    assert TOPICS.select(["b"]).unselected == {A, C}
    assert TOPICS.select(None) is TOPICS
    with pytest.raises(ConsumerError, match="'nope' is not a table of set 'p'"):
        TOPICS.select(["nope"])
    twice = SetTopics("p", "json", TXN, (TableTopic("s1", "t", "x"), TableTopic("s2", "t", "y")))
    with pytest.raises(ConsumerError, match="ambiguous"):
        twice.select(["t"])


def test_pending_before():
    r, log = strict(), Log()
    feed(r, log.begin(1, pos(1, 0)), log.end(1, pos(1, 0), {A: 1}))
    assert r.pending_before(1) and not r.pending_before(0)
    feed(r, log.data(A, 0, "c", 1, pos(1, 0), 1))
    assert not r.pending_before(2)


def test_orphans_of_an_end_read_before_any_begin_are_dropped_without_waiting_for_a_begin():
    r, log = Reassembler(TOPICS, PARTS, drop_orphans=True), Log()
    assert feed(r, log.end(3, pos(1, 5), {A: 1}), log.data(A, 0, "c", 3, pos(1, 5), 1)) == []
    assert r.orphans_dropped == 1 and r.buffered(A, 0) == 0 and r.idle


def test_online_snapshot_rows_and_marks_between_transactions():
    """An online snapshot's rows come between stream transactions, framed by SNAPSHOT_BEGIN/END
    records (txid 0) that open no transaction: they are kept in snapshot_marks."""
    r, log = strict(), Log()
    first = [log.begin(1, pos(1, 0)), log.data(A, 0, "c", 1, pos(1, 0), 1), log.end(1, pos(1, 0), {A: 1})]
    mark = TxnRecord("SNAPSHOT_BEGIN", 0, "00000000000000000001:s0000000000", 1000, 0, log._next(TXN, 0), table=A)
    rows = [log.data(A, 0, "r", 0, f"00000000000000000001:s{i:010d}", i) for i in range(2)]
    done = TxnRecord("SNAPSHOT_END", 0, "00000000000000000001:s0000000002", 1000, 0, log._next(TXN, 0), 2, table=A)
    second = [log.begin(2, pos(2, 0)), log.data(A, 0, "u", 2, pos(2, 0), 1), log.end(2, pos(2, 0), {A: 1})]
    out = feed(r, *first, mark, *rows, done, *second)
    assert [(t.snapshot, t.txid, len(t.changes)) for t in out] == [(False, 1, 1), (True, 0, 2), (False, 2, 1)]
    assert [m.kind for m in r.snapshot_marks] == ["SNAPSHOT_BEGIN", "SNAPSHOT_END"]
    assert r.snapshot_marks[1].event_count == 2 and r.idle


def test_transaction_cut_by_the_start_offsets_is_dropped_when_the_bootstrap_covers_it():
    """Started mid-stream after a bootstrap: txid 5's BEGIN/END are past the transactions topic's
    start but its data in b is before b's start (commit markers reach partitions one by one), so
    it can never complete; the bootstrap holds it, so it is dropped and txid 6 comes out."""
    r, log = Reassembler(TOPICS, PARTS, drop_orphans=True, covered=lambda txid, _pos: txid < 6), Log()
    later = log.data(B, 0, "c", 6, pos(3, 0), 1)
    out = feed(r, log.begin(5, pos(2, 0)), log.end(5, pos(2, 0), {B: 1}), log.begin(6, pos(3, 0)), later,
               log.end(6, pos(3, 0), {B: 1}))
    assert [(t.txid, ops(t)) for t in out] == [(6, [("c", "public.b", 1)])]
    assert r.cut_dropped == 1 and r.idle


def test_transaction_cut_by_the_start_offsets_not_covered_is_still_an_order_error():
    r, log = Reassembler(TOPICS, PARTS, drop_orphans=True, covered=lambda txid, _pos: txid < 5), Log()
    later = log.data(B, 0, "c", 6, pos(3, 0), 1)
    with pytest.raises(OrderError, match="txid 5 can never complete"):
        feed(r, log.begin(5, pos(2, 0)), log.end(5, pos(2, 0), {B: 1}), later)
    assert r.cut_dropped == 0


def test_data_of_a_dropped_cut_transaction_arriving_later_elsewhere_is_dropped_too():
    """txid 5's b message is before b's start; its a message (partition 1, empty so far) comes
    after the drop: dropped as well, not an order error."""
    r, log = Reassembler(TOPICS, PARTS, drop_orphans=True, covered=lambda txid, _pos: txid < 6), Log()
    first = feed(r, log.begin(5, pos(2, 0)), log.end(5, pos(2, 1), {A: 1, B: 1}), log.data(B, 0, "c", 6, pos(3, 0), 1),
                 log.begin(6, pos(3, 0)), log.end(6, pos(3, 0), {B: 1}))
    straggler = feed(r, log.data(A, 1, "c", 5, pos(2, 1), 2))
    assert [t.txid for t in first] == [6] and straggler == [] and r.cut_dropped == 1


def test_ddl_marks_become_changes_of_their_transaction():
    """TABLE_DROPPED, SCHEMA_CHANGED and TOPIC_CHANGED (docs/wire.rst) inside a transaction, like
    TRUNCATE: changes of ops drop / schema / topic; RowState forgets a dropped table's rows."""
    from pgshovel2.consumer import RowState

    log, r = Log(), strict()
    got = feed(r, log.begin(1, pos(1, 0)), log.data(B, 0, "c", 1, pos(1, 0), 7),
               TxnRecord("SCHEMA_CHANGED", 1, pos(1, 1), 1000, 0, log._next(TXN, 0), table=C),
               TxnRecord("TOPIC_CHANGED", 1, pos(1, 2), 1000, 0, log._next(TXN, 0), counts={A: 0}, table=C),
               log.end(1, pos(1, 2), {B: 1}),
               log.begin(2, pos(2, 0)),
               TxnRecord("TABLE_DROPPED", 2, pos(2, 0), 1000, 0, log._next(TXN, 0), table=B),
               log.end(2, pos(2, 0), {}))
    assert [ops(t) for t in got] == [[("c", "public.b", 7), ("schema", "public.c", None), ("topic", "public.c", None)],
                                     [("drop", "public.b", None)]]
    assert got[0].changes[2].value == {"new_topic": A}
    state = RowState()
    state.apply_all(got)
    assert "public.b" not in state.tables


def test_topic_change_to_a_topic_the_reader_does_not_read_asks_for_a_restart():
    log, r = Log(), strict()
    with pytest.raises(ConsumerError, match=r"goes on in topic 'p.public.c.g2'.*restart it"):
        feed(r, log.begin(1, pos(1, 0)),
             TxnRecord("TOPIC_CHANGED", 1, pos(1, 0), 1000, 0, log._next(TXN, 0), counts={C + ".g2": 0}, table=C),
             log.end(1, pos(1, 0), {}))


def test_set_topics_of_a_record_list_retired_topics_first():
    from pgshovel2.catalog import Column, Table
    from pgshovel2.config import SetConfig, TableConfig
    from pgshovel2.setrecord import SetRecord

    config = SetConfig("dbname=x", (TableConfig("s", "t"),), encoding="json")
    table = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),), ("id",), "primary key",
                  generation=2)
    record = SetRecord.new("c", "p", config, (table,)).replace(retired=(
        {"table": '"s"."t"', "schema": "s", "name": "t", "topic": "p.s.t", "why": "new-topic"},
        {"table": '"s"."gone"', "schema": "s", "name": "gone", "topic": "p.s.gone", "why": "dropped"}))
    topics = SetTopics.from_record(record)
    assert [(t.table, t.topic) for t in topics.tables] == [("s.t", "p.s.t"), ("s.gone", "p.s.gone"),
                                                           ("s.t", "p.s.t.g2")]
    assert [t.topic for t in topics.select(["s.t"]).tables] == ["p.s.t", "p.s.t.g2"]


def test_materialize_removes_a_dropped_tables_rows_and_refuses_a_topic_change():
    """sparkjobs.changes.truncations: TABLE_DROPPED removes like TRUNCATE; TOPIC_CHANGED is named."""
    import json

    from pgshovel2.sparkjobs import changes

    rows = [{"value": json.dumps(r).encode(), "offset": i} for i, r in enumerate([
        {"type": "BEGIN", "txid": 9, "position": pos(5, 0)},
        {"type": "TABLE_DROPPED", "txid": 9, "position": pos(5, 1), "table": B},
        {"type": "TOPIC_CHANGED", "txid": 9, "position": pos(5, 2), "table": C},
        {"type": "TRUNCATE", "txid": 9, "position": pos(5, 3), "table": A}])]
    got = list(changes.truncations(None, "1:1:")(iter(rows)))
    assert got == [(B, pos(5, 1), "TABLE_DROPPED"), (C, pos(5, 2), "TOPIC_CHANGED"), (A, pos(5, 3), "TRUNCATE")]


def test_debezium_truncate_event_counts_and_the_record_stands_for_it():
    """A debezium set's op t event (debezium: {skipped_operations: []}) is a data message of its
    transaction (counted in END) but no change of its own: the TRUNCATE record is, in order."""
    r, log = strict(), Log()
    begin = log.begin(12, pos(7, 0))
    a1 = log.data(A, 0, "c", 12, pos(7, 0), 1)
    trunc = log.truncate(12, pos(7, 1), A)
    event = DataMessage(A, 1, log._next(A, 1), "t", 12, pos(7, 1), 1000, None, {"op": "t"})
    a2 = log.data(A, 0, "c", 12, pos(7, 2), 2)
    end = log.end(12, pos(7, 2), {A: 3})
    [txn] = feed(r, begin, a1, trunc, event, a2, end)
    assert ops(txn) == [("c", "public.a", 1), ("t", "public.a", None), ("c", "public.a", 2)]
