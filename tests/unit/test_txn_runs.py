"""TxnRuns (pgshovel2.relay.source.TxnRun): whole small transactions of PgQ event rows written by
the native lane in one call (Emitter.txn_run, Lane.encode_txns) against the items the PgQ source
gives without them (TxnRun.expand: Begin, ChangeRuns, Commit per transaction) relayed the way the
loop relays them: the same messages, headers, BEGIN and END records (JSON and Avro), byte for byte
and in order, for random rows of every WIRE.md type in both envelopes, with transactions the lane
gives back whole (a row it leaves to Python, rows of two ts_ms). Then PgqSource._batch's cut of a
batch into TxnRuns, and the relay loop over both forms of one stream.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random
import threading

import pytest

from pgshovel2.catalog import Table
from pgshovel2.codec import avro, native
from pgshovel2.relay import pgq_source
from pgshovel2.relay.emitter import Emitter
from pgshovel2.relay.pgq_source import PgqSource
from pgshovel2.relay.source import Begin, ChangeRun, Commit, Control, Idle, TxnRun
from pgshovel2.wire import TRIGGER, Position, change_header_at, position_prefix
from tests.unit.test_lane import UNIT, UNKEYED, ListSink, relay_run, route, trigger_rows, workload
from tests.unit.test_native_codec import ARRAYS, TYPES, rows, table
from tests.unit.test_relay_loop import TAG, FakeSink, FakeSource, assert_transactions_whole, run
from tests.unit.test_relay_loop import V1 as LOOP_V1

NOW_NS = 1_700_000_000_123_456_789  # the debezium clock stands still: a transaction the lane gives
# back after writing some of its events has stamped them, so only the processing time could differ
PREFIX = position_prefix(TRIGGER, UNIT)


def transactions(rows_: list[tuple], seed: int) -> list[tuple]:
    """rows_ (trigger rows of one txid) regrouped into transactions of 1..6 rows, each its own txid
    and ts_ms; now and then one whose last row has another ts_ms (PgQ's ev_time per event)."""
    rng = random.Random(seed)
    out, i, n = [], 0, 0
    while i < len(rows_):
        size = rng.randint(1, 6)
        txid, ts_ms = (5 << 32) + 1000 + n, 1_700_000_000_000 + 7 * n
        group = [(txid, ts_ms, *r[2:]) for r in rows_[i:i + size]]
        if len(group) > 1 and rng.random() < 0.1:
            group[-1] = (txid, ts_ms + 1, *group[-1][2:])
        out += group
        i, n = i + size, n + 1
    return out


def emitter(tbl: Table, use_avro: bool, envelope: str) -> tuple[Emitter, ListSink]:
    """An emitter of tbl and UNKEYED; Avro transaction records with use_avro."""
    sink = ListSink()
    routes = {tbl.qualified: route(tbl, "topic.t", use_avro, envelope, clock=lambda: NOW_NS),
              UNKEYED.qualified: route(UNKEYED, "topic.u", False, envelope, clock=lambda: NOW_NS)}
    txn_writer = avro.AvroWriter(avro.TRANSACTION_SCHEMA, 9) if use_avro else None
    em = Emitter("myset", routes, "txns", txn_writer, sink)
    em.version = 3
    return em, sink


def relay_items(em: Emitter, sink: ListSink, items: list) -> None:
    """What the loop writes for a transaction's Begin, ChangeRuns and Commit (BEGIN before its
    changes here, as Lane.encode_txns writes it; the loop writes it after the lane's first messages,
    which changes no topic's order)."""
    for item in items:
        if type(item) is Begin:
            em.begin(item.txid, change_header_at(PREFIX, item.ordinal), item.ts_ms)
        elif type(item) is ChangeRun:
            relay_run(em, sink, item, PREFIX)
        else:
            assert type(item) is Commit and not item.complete
            em.end(item.txid, change_header_at(PREFIX, item.ordinal - 1), item.ts_ms)


def txn_run(rows_: list[tuple], ordinal: int = 0) -> TxnRun:
    return TxnRun(UNIT, ordinal, rows_, rows_[-1][1], pgq_source._expand_txns)


@pytest.mark.parametrize("envelope", ["row", "debezium"])
@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
@pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])
def test_txn_runs_through_the_lane_equal_their_items_relayed_one_by_one(use_avro, envelope, arrays):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    rows_ = transactions(trigger_rows(workload(9, rows(23, 300, True, types)), tbl), 4)
    em, want = emitter(tbl, use_avro, envelope)
    relay_items(em, want, pgq_source._expand_txns(txn_run(rows_), 0, len(rows_)))
    em, got = emitter(tbl, use_avro, envelope)
    laned = start = 0
    while start < len(rows_):  # runs of whole transactions, as PgqSource._batch cuts them
        stop = min(len(rows_), start + 40)
        while stop < len(rows_) and rows_[stop][0] == rows_[stop - 1][0]:
            stop += 1
        run_, i = txn_run(rows_[start:stop], start), 0
        while i < len(run_.records):  # as Relay._txn_run
            done, back = em.txn_run(run_, i, PREFIX)
            laned += done
            relay_items(em, got, run_.expand(run_, i + done, i + done + back))
            i += done + back
        start = stop
    assert got.produced == want.produced
    assert laned < len(rows_)  # some transactions were given back (two ts_ms, arrays, unkeyed deletes)
    assert arrays or laned > len(rows_) // 10


def test_a_transaction_the_lane_gives_back_is_left_whole():
    tbl = table(False, TYPES[:3])
    good = (7, 1_000, "I", '[1, true, 2, 3]', tbl.qualified, None)
    other = (8, 1_000, "I", '[2, true, 2, 3]', '"s"."gone"', None)  # a table outside the set
    em, sink = emitter(tbl, False, "row")
    assert em.txn_run(txn_run([good, good, other, good]), 0, PREFIX) == (2, 1)
    assert [m[0] for m in sink.produced] == ["txns", "topic.t", "topic.t", "txns"]
    assert em.txn_run(txn_run([good, good, other, good]), 3, PREFIX) == (1, 0)
    assert em.txn_run(txn_run([other, good]), 0, PREFIX) == (0, 1)


def chunk_rows(spec: str) -> list[tuple]:
    """Trigger rows of spec, one letter a row: its txid's letter, upper case an I row with data,
    lower case a control row (V)."""
    out = []
    for c in spec:
        txid = ord(c.lower())
        out.append((txid, 1_000, "I", "[1]", TAG, None) if c.isupper() else (txid, 1_000, "V", '{"version": 1}',
                                                                              TAG, None))
    return out


@pytest.mark.parametrize(("spec", "end"), [
    ("AABBBC", 5),  # the chunk's last transaction may go on in the next chunk
    ("AAbB", 2),  # a control row: its transaction is not taken
    ("AaB", 0),
    ("AABbC", 2),
    ("A", 0),
])
def test_txns_end_takes_whole_transactions_of_data_rows_only(spec, end):
    assert pgq_source._txns_end(chunk_rows(spec), 0) == end


def test_txns_end_stops_at_run_max_rows():
    rows_ = [(n // 2, 1_000, "I", "[1]", TAG, None) for n in range(2 * pgq_source.RUN_MAX)]
    assert pgq_source._txns_end(rows_, 0) == pgq_source.RUN_MAX
    big = [(1, 1_000, "I", "[1]", TAG, None)] * (pgq_source.RUN_MAX + 1) + rows_
    assert pgq_source._txns_end(big, 0) == 0


class ChunkSource(PgqSource):
    """PgqSource._batch over given chunks (no database): what it yields for a batch."""

    def __init__(self, chunks: list[list[tuple]], txn_runs: bool):
        self.chunks, self.runs, self.txn_runs, self.raw_rows = chunks, True, txn_runs, True

    def _event_chunks(self, batch, snapshot):
        return iter(self.chunks)


class Batch:
    cur_tick_id = UNIT


def test_batch_items_with_txn_runs_expand_to_the_items_without():
    chunks = [chunk_rows("AABBBCCd"), chunk_rows("DDEEFFG"), chunk_rows("GHH")]
    plain = list(ChunkSource(chunks, False)._batch(Batch, None))
    with_runs = list(ChunkSource(chunks, True)._batch(Batch, None))
    runs = [i for i in with_runs if type(i) is TxnRun]
    assert [len(r.records) for r in runs] == [7, 4]  # A, B, C; E, F (D has a control row, G and H end chunks)
    expanded = []
    for item in with_runs:
        expanded += item.expand(item, 0, len(item.records)) if type(item) is TxnRun else [item]
    assert expanded == plain
    assert [type(i) for i in plain].count(Control) == 1 and plain[-1] == Commit(ord("h"), 1_000, UNIT, 18, True)
    begins = [i for i in plain if type(i) is Begin]
    assert [b.txid for b in begins] == [ord(c) for c in "abcdefgh"]
    assert [b.ordinal for b in begins] == [0, 2, 5, 7, 10, 12, 14, 16]


class RowsSource(FakeSource):
    """The PgQ source's items for batches of trigger rows of the loop tests' table, with or without
    TxnRuns (PgqSource._batch over one chunk per batch)."""

    def __init__(self, batches: list[list[tuple]], runs: bool, stop: threading.Event):
        super().__init__([], "batch", stop)
        self.batches, self.runs = batches, runs

    def items(self, position):
        for number, rows_ in enumerate(self.batches, start=1):
            source = ChunkSource([rows_], self.runs)
            yield from source._batch(type("B", (), {"cur_tick_id": number}), None)
            while not (self.acked and self.acked.reaches(number, 0, True)):
                yield Idle(0.0)
        self.stop.set()
        while True:
            yield Idle(0.0)

    def ack(self, position: Position) -> None:
        self.acked = position


def begins_first(sink: FakeSink) -> int:
    """Transactions whose BEGIN record was produced before their first data message (the loop
    writes it after the lane's first messages; Lane.encode_txns before)."""
    seen, first = set(), 0
    for topic, _key, value, headers in sink.committed:
        if topic == LOOP_V1.topics.transactions and b'"BEGIN"' in value:
            first += json.loads(value)["txid"] not in seen
        elif "pgshovel.txid" in headers:
            seen.add(int(headers["pgshovel.txid"]))
    return first


@pytest.mark.parametrize("soft", [40, 20000])
def test_the_loop_relays_txn_runs_as_it_relays_their_items(soft):
    rng = random.Random(3)
    batches = []
    for b in range(6):
        rows_ = []
        for t in range(rng.randint(1, 12)):
            txid = 100 * b + t
            for _ in range(rng.randint(1, 4)):
                key = rng.randint(1, 40)
                rows_.append((txid, 1_000, rng.choice("IU"), f'[{key}, "v{key}"]', LOOP_V1.tables[0].qualified, None))
        batches.append(rows_)
    sinks, changes, begun = [], [], []
    for runs in (False, True):
        sink = FakeSink()
        changes.append(run(RowsSource(batches, runs, threading.Event()), sink, soft=soft).changes)
        assert_transactions_whole(sink)
        sinks.append({t: [m for m in sink.committed if m[0] == t] for t in {m[0] for m in sink.committed}})
        begun.append(begins_first(sink))
    plain, laned = sinks
    assert changes[0] == changes[1] == sum(map(len, batches))
    assert begun[1] > begun[0] + 20  # the lane wrote those transactions whole (BEGIN first)
    assert plain.keys() == laned.keys()
    for topic in plain:
        if not topic.endswith("positions"):
            assert laned[topic] == plain[topic], topic
