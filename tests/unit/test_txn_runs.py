"""TxnRuns (pgshovel2.relay.source.TxnRun): whole small transactions of PgQ event rows written by
the native lane in one call (Emitter.txn_run, Lane.encode_txns) against the items the PgQ source
gives without them (Begin, ChangeRuns, Commit per transaction) relayed the way the loop relays
them: the same messages, headers, BEGIN and END records (JSON and Avro), byte for byte and in
order, for random rows of every WIRE.md type in both envelopes, with transactions the lane gives
back whole (a row it leaves to Python) and transactions the source leaves out of runs (rows of
two ts_ms, a control row, a chunk's last). Then PgqSource._batch's cut of a batch into TxnRuns
(_txn_bounds), and the relay loop over both forms of one stream.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random
import threading

import pytest

from pgshovel2.catalog import Table
from pgshovel2.codec import avro, native
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.pgq import runs as pgq_runs
from pgshovel2.relay.pgq.source import PgqSource
from pgshovel2.relay.source import RUN_MAX, Begin, Change, ChangeRun, Commit, Control, Idle, TxnBounds, TxnRun
from pgshovel2.wire import TRIGGER, Position, change_header_at, position_prefix
from tests.unit.test_lane import (
    UNIT,
    UNKEYED,
    ListSink,
    every_form,
    relay_change,
    relay_run,
    route,
    trigger_rows,
    workload,
)
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


def relay_items(em: Emitter, sink: ListSink, items: list, backend: str = TRIGGER) -> int:
    """What the loop writes for items (BEGIN before a transaction's changes here, as
    Lane.encode_txns writes it; the loop writes it after the lane's first messages, which changes
    no topic's order): a TxnRun through the lane as Relay._txn_run relays it, a transaction the
    lane gives back as its items. Returns the transactions the lane took."""
    laned, open_ = 0, False
    for item in items:
        kind = type(item)
        if kind is TxnRun:
            i = 0
            while i < len(item.txns):
                done = em.txn_run(item, i)
                laned, i = laned + done, i + done
                if i < len(item.txns):
                    laned += relay_items(em, sink, item.expand(item, i, i + 1), backend)
                    i += 1
            continue
        prefix = position_prefix(backend, item.unit)
        if kind is Begin:
            em.begin(item.txid, change_header_at(prefix, item.ordinal), item.ts_ms, item.ts_us, item.last_lsn)
            open_ = True
        elif kind is ChangeRun:
            relay_run(em, sink, item, prefix)
        elif kind is Change:
            relay_change(em, sink, item, prefix)
        elif kind is Commit and open_:
            em.end(item.txid, change_header_at(prefix, item.ordinal - 1), item.ts_ms)
            open_ = False
    return laned


def chunked(rows_: list[tuple], size: int) -> list[list[tuple]]:
    """rows_ cut into chunks of size rows (a transaction may go on in the next chunk, as in a batch
    read by the cursor)."""
    return [rows_[i:i + size] for i in range(0, len(rows_), size)]


@every_form
def test_txn_runs_through_the_lane_equal_their_items_relayed_one_by_one(use_avro, envelope, arrays):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    chunks = chunked(transactions(trigger_rows(workload(9, rows(23, 300, True, types)), tbl), 4), 40)
    em, want = emitter(tbl, use_avro, envelope)
    assert relay_items(em, want, list(ChunkSource(chunks, False)._batch(Batch, None))) == 0
    em, got = emitter(tbl, use_avro, envelope)
    items = list(ChunkSource(chunks, True)._batch(Batch, None))
    laned = relay_items(em, got, items)
    assert got.produced == want.produced
    in_runs = sum(len(i.txns) for i in items if type(i) is TxnRun)
    assert laned < in_runs  # some transactions were given back (arrays, unkeyed updates without old row)
    assert arrays or laned > in_runs // 6


def test_a_transaction_the_lane_gives_back_is_left_whole():
    tbl = table(False, TYPES[:3])
    good = (7, 1_000, "I", '[1, true, 2, 3]', tbl.qualified, None)
    other = (8, 1_000, "I", '[2, true, 2, 3]', '"s"."gone"', None)  # a table outside the set
    rows_ = [good, good, other, (9, *good[1:])]
    run_ = TxnRun(rows_, [TxnBounds(0, 2, 7, 1_000, 1_000_000, None, PREFIX, 0, UNIT),
                          TxnBounds(2, 3, 8, 1_000, 1_000_000, None, PREFIX, 2, UNIT),
                          TxnBounds(3, 4, 9, 1_000, 1_000_000, None, PREFIX, 3, UNIT)], False, None,
                  pgq_runs.expand_txns)
    em, sink = emitter(tbl, False, "row")
    assert em.txn_run(run_, 0) == 1
    assert [m[0] for m in sink.produced] == ["txns", "topic.t", "topic.t", "txns"]
    assert em.txn_run(run_, 1) == 0
    assert em.txn_run(run_, 2) == 1
    assert len(sink.produced) == 7


@pytest.mark.parametrize("topic", ['to"pic', "t\\opic", "tøpic", "to pic"])
def test_a_topic_the_transaction_record_would_escape_is_left_to_python(topic):
    tbl = table(False, TYPES[:3])
    good = (7, 1_000, "I", '[1, true, 2, 3]', tbl.qualified, None)
    run_ = TxnRun([good], [TxnBounds(0, 1, 7, 1_000, 1_000_000, None, PREFIX, 0, UNIT)], False, None,
                  pgq_runs.expand_txns)
    sink = ListSink()
    em = Emitter("myset", {tbl.qualified: route(tbl, topic, False, "row")}, "txns", None, sink)
    assert em.txn_run(run_, 0) == 0 and not sink.produced
    plain = Emitter("myset", {tbl.qualified: route(tbl, "topic.t", False, "row")}, "txns", None, ListSink())
    assert plain.txn_run(run_, 0) == 1


def chunk_rows(spec: str) -> list[tuple]:
    """Trigger rows of spec, one letter a row: its txid's letter, upper case an I row with data,
    lower case a control row (V)."""
    out = []
    for c in spec:
        txid = ord(c.lower())
        out.append((txid, 1_000, "I", "[1]", TAG, None) if c.isupper() else (txid, 1_000, "V", '{"version": 1}',
                                                                              TAG, None))
    return out


def cut(rows_: list[tuple], start: int = 0) -> list[tuple[int, int]]:
    return [(t.start, t.stop) for t in pgq_runs.txn_bounds(rows_, start, 0, UNIT, PREFIX)]


@pytest.mark.parametrize(("spec", "bounds"), [
    ("AABBBC", [(0, 2), (2, 5)]),  # the chunk's last transaction may go on in the next chunk
    ("AAbB", [(0, 2)]),  # a control row: its transaction is not taken
    ("AaB", []),
    ("AABbC", [(0, 2)]),
    ("A", []),
])
def test_txn_bounds_take_whole_transactions_of_data_rows_only(spec, bounds):
    assert cut(chunk_rows(spec)) == bounds


def test_txn_bounds_take_one_ts_ms_a_transaction():
    rows_ = chunk_rows("AABBCC")
    rows_[3] = (rows_[3][0], 1_001, *rows_[3][2:])  # B's second row: another ts_ms (PgQ's ev_time per event)
    assert cut(rows_) == [(0, 2)]
    assert cut(rows_, 4) == []  # C ends the chunk


def test_txn_bounds_stop_at_run_max_rows():
    rows_ = [(n // 2, 1_000, "I", "[1]", TAG, None) for n in range(2 * RUN_MAX)]
    assert cut(rows_)[-1][1] == RUN_MAX
    big = [(1, 1_000, "I", "[1]", TAG, None)] * (RUN_MAX + 1) + rows_
    assert cut(big) == []


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
    assert [[t.txid for t in r.txns] for r in runs] == [[ord(c) for c in "abc"], [ord(c) for c in "ef"]]
    expanded = []
    for item in with_runs:
        expanded += item.expand(item, 0, len(item.txns)) if type(item) is TxnRun else [item]
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


def test_a_batch_committed_in_part_goes_on_in_the_lane(monkeypatch):
    """A PgQ batch bigger than a Kafka transaction is committed in part, at the ends of its source
    transactions; the rest of the batch still goes through the native lane (the committed position
    covers none of it), and every change comes once, its transaction whole."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    laned, change_run = [], Emitter.change_run
    monkeypatch.setattr(Emitter, "change_run", lambda self, *a: laned.append(change_run(self, *a)) or laned[-1])
    rng, batches = random.Random(5), []
    for b in range(3):
        batches.append([(100 * b + t, 1_000, "I", f'[{k}, "v{k}"]', LOOP_V1.tables[0].qualified, None)
                        for t in range(40) for k in range(rng.randint(1, 4))])
    sink = FakeSink()
    relay = run(RowsSource(batches, True, threading.Event()), sink, soft=40)
    total = sum(map(len, batches))
    assert relay.changes == total
    assert_transactions_whole(sink)
    assert sink.commits >= 3 * 4  # each batch in several Kafka transactions
    assert sum(laned) >= 0.9 * total
