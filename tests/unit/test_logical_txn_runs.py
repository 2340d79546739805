"""TxnRuns of the logical backend (our output plugin): LogicalSource._read over a replication
stream held in memory, with and without TxnRuns. The items are the same once TxnRuns are expanded
(and ChangeRuns taken change by change: a transaction the source opened but could not finish in a
run goes on in other ChangeRuns), the decoder ends up with the same transaction ends to confirm,
and the messages the emitter writes for both forms are the same byte for byte, for random rows of
every WIRE.md type in both envelopes, JSON and Avro. The stream has transactions the lane cannot
take whole (a TRUNCATE, an unchanged TOASTed value, arrays the native codec leaves to Python), pauses
inside and between transactions (the source reads only what the stream already holds), and
transactions at or below the committed position (they go the old way: the loop skips them).

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import random
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple

import pytest

from pgshovel2.codec import native
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder
from pgshovel2.relay.logical.records import BEGIN_FIELDS, COMMIT_FIELDS, RecordDecoder, pack_reader
from pgshovel2.relay.logical.runs import PG_EPOCH_US
from pgshovel2.relay.logical.source import LogicalSource
from pgshovel2.relay.source import Change, ChangeRun, Idle, Lag, TxnRun
from pgshovel2.wire import LOGICAL, Position, position_prefix
from tests.unit.test_lane import TXID, UNIT, UNKEYED, every_form, record, workload
from tests.unit.test_lane_pgoutput import in_transaction
from tests.unit.test_lane_pgoutput import messages as pg_messages
from tests.unit.test_native_codec import ARRAYS, TYPES, rows, table
from tests.unit.test_native_pgoutput import MORE_ARRAYS, OID
from tests.unit.test_native_pgoutput import table as pg_table
from tests.unit.test_relay_loop import TAG, FakeSink, assert_transactions_whole, run
from tests.unit.test_txn_runs import begins_first, emitter, relay_items

FIRST_LSN = 0x2_0000_0000


class Message(NamedTuple):
    payload: bytes
    data_start: int


class Cursor:
    """A replication cursor over messages; None in them: the stream holds nothing more for now."""

    def __init__(self, messages: list[Message | None]):
        self.messages = list(reversed(messages))

    def read_message(self) -> Message | None:
        return self.messages.pop() if self.messages else None


class StreamSource(LogicalSource):
    """LogicalSource._read over a Cursor (no database): our plugin's records as raw rows for
    tags, or pgoutput's messages for decoder (a PgoutputDecoder)."""

    def __init__(self, tags: list[str], messages: list[Message | None], txn_runs: bool,
                 decoder: PgoutputDecoder | None = None, scan: bool = True):
        self._decoder = decoder or RecordDecoder(tags, "slot", raw_rows=True)
        self._decoder.last_lsn = FIRST_LSN - 8
        self._cur = Cursor(messages)
        self._reader = None if decoder else pack_reader(self._cur.read_message)
        self._read_message = self._reader.read if self._reader else self._cur.read_message
        self.scans = scan  # the decoder's native txn_scan makes TxnRuns (else its txn_run, in Python)
        self.runs, self.txn_runs, self.stream = True, txn_runs, None
        self._in_txn, self._last_start, self._flushed = False, None, 0
        self.heartbeat_interval, self.wait_cap, self.slot = 1e9, 0.0, "slot"

    def items_until_idle(self, committed: int) -> list:
        """The items up to the first Idle after the stream holds nothing more."""
        out = []
        for item in self._read(Position(committed, 0, True, None, LOGICAL), 0.0):
            if type(item) is Idle:
                if not self._cur.messages:
                    return out
                continue
            out.append(item)
        raise AssertionError("unreachable")


def stream(records: list[bytes], seed: int, odd: bool = True) -> list[Message | None]:
    """records (change records of our plugin) as transactions of 1..6 changes, each its own txid,
    commit LSN and time: BEGIN, changes, COMMIT; now and then (odd) a TRUNCATE among the changes, a
    change with an unchanged value (a TOASTed column), a pause inside or after a transaction."""
    rng, out, i, n = random.Random(seed), [], 0, 0
    lsn = FIRST_LSN
    while i < len(records):
        size, commit_lsn = rng.randint(1, 6), lsn + 0x100
        out.append(Message(b"B" + BEGIN_FIELDS.pack(commit_lsn, 9000 + n, 1_000_000 + 7_000 * n), lsn))
        for data in records[i:i + size]:
            if odd and rng.random() < 0.03:
                out.append(Message(b"T" + struct.pack(">QH", lsn + 1, 0), lsn + 1))
            if odd and rng.random() < 0.03:
                data = unchanged(data)
            out.append(Message(data, lsn + 2))
            if odd and rng.random() < 0.05:
                out.append(None)
        out.append(Message(b"C" + COMMIT_FIELDS.pack(commit_lsn, commit_lsn + 8, size), commit_lsn))
        if odd and rng.random() < 0.2:
            out.append(None)
        i, n, lsn = i + size, n + 1, commit_lsn + 8
    return out


def packed(messages: list[Message | None], seed: int) -> list[Message | None]:
    """messages as the plugin writes them in format 4: a transaction's records in packs (P), each
    ending at its COMMIT or, in between, where a pack filled up (at random here), with the XLogData
    start of its last record; a pause (None) only between packs."""
    rng, out, recs, pause = random.Random(seed), [], [], False
    for msg in messages:
        if msg is None:
            pause = True
            continue
        recs.append(msg)
        if msg.payload[:1] == b"C" or rng.random() < 0.15:
            out.append(Message(b"P" + b"".join(struct.pack(">I", len(m.payload)) + m.payload for m in recs),
                               recs[-1].data_start))
            recs = []
            if pause:
                out.append(None)
                pause = False
    assert not recs
    return out


def unchanged(data: bytes) -> bytes:
    """An UPDATE of data's row whose second value (no key column) was not logged (flag 4 and its
    list after the row)."""
    _lsn, _index, flags, size = struct.unpack_from(">QHBI", data, 1)
    if data[:1] != b"U" or flags & 1:
        return data
    return data[:11] + bytes([flags | 4]) + data[12:16 + size] + struct.pack(">HH", 1, 1)


def flat(items: list) -> list:
    """items with TxnRuns expanded and ChangeRuns as their Changes."""
    out = []
    for item in items:
        if type(item) is TxnRun:
            out += flat(item.expand(item, 0, len(item.txns)))
        elif type(item) is ChangeRun:
            out += item.expand(item, 0, len(item.records))
        else:
            out.append(item)
    return out


def both(messages: list[Message | None], tags: list[str], committed: int = 0,
         decoder: Callable[[], PgoutputDecoder] | None = None, scan: bool = True) -> tuple[list, list, list, list]:
    """(items without TxnRuns, items with, the decoders' ends without and with); decoder: makes a
    pgoutput decoder for each (None: our plugin's records); scan: TxnRuns come from the decoder's
    native txn_scan (else from its txn_run, in Python)."""
    plain, laned = (StreamSource(tags, messages, runs, decoder() if decoder else None, scan) for runs in (False, True))
    items = plain.items_until_idle(committed), laned.items_until_idle(committed)
    return items[0], items[1], list(plain._decoder.ends), list(laned._decoder.ends)


def needs_native(scan: bool) -> None:
    if scan:
        assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"


@pytest.mark.parametrize("scan", [False, True])
def test_a_stream_with_txn_runs_gives_the_items_it_gives_without(scan):
    needs_native(scan)
    tbl = table(True, TYPES)
    messages = stream(workload(5, rows(31, 400, True, TYPES)), 8)
    plain, with_runs, ends, ends_laned = both(messages, [tbl.qualified, UNKEYED.qualified], scan=scan)
    runs = [i for i in with_runs if type(i) is TxnRun]
    assert len(runs) > 5 and sum(len(r.txns) for r in runs) > 40
    assert all(len(r.records) <= 512 and r.complete for r in runs)
    assert flat(with_runs) == flat(plain)
    assert ends_laned == ends and len(ends) == sum(m is not None and m.payload[:1] == b"C" for m in messages)


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("committed", [0, 1])
def test_a_stream_of_packs_gives_the_items_of_its_records_one_by_one(committed, scan):
    """Format 4: the same records in packs give the same items, with and without TxnRuns (made
    in Python or by the native reader's txn_scan), and the same transaction ends to confirm
    (committed 1: the first transactions are in Kafka)."""
    needs_native(scan)
    tbl = table(True, TYPES)
    tags = [tbl.qualified, UNKEYED.qualified]
    messages = stream(workload(5, rows(37, 300, True, TYPES)), 21)
    at = FIRST_LSN + 0x100 * 6 if committed else 0
    plain, with_runs, ends, ends_laned = both(messages, tags, at, scan=scan)
    packed_plain, packed_runs, packed_ends, packed_ends_laned = both(packed(messages, 22), tags, at, scan=scan)
    assert sum(type(i) is TxnRun for i in packed_runs) > 5
    assert flat(packed_plain) == flat(plain) == flat(packed_runs) == flat(with_runs)
    assert packed_ends == ends == packed_ends_laned == ends_laned and len(ends) > 40


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("plugin", ["ours", "pgoutput"])
def test_txn_runs_do_not_read_on_after_a_commit_the_confirmed_position_reaches(plugin, scan, monkeypatch):
    """While a keepalive read could confirm a transaction not yet in Kafka (the confirmed
    position reaches the start of the COMMIT just read), a TxnRun ends at that COMMIT: with
    everything below the confirmed position, every run holds one transaction."""
    needs_native(scan)
    if plugin == "ours":
        tbl, decoder = table(True, TYPES[:3]), None
        messages = packed(stream(workload(4, rows(35, 200, True, TYPES[:3])), 14, odd=False), 23)
    else:
        tbl = pg_table(TYPES[:3])
        messages = [m for m in pgoutput_stream(pg_messages(8, tbl, 200), 6) if m is None or m.payload[:1] != b"T"]
        decoder = pgoutput_decoder(tbl, monkeypatch)
    runs = {}
    for flushed in (0, FIRST_LSN + 0x100_0000):
        source = StreamSource([tbl.qualified, UNKEYED.qualified], messages, True, decoder and decoder(), scan)
        source._flushed, runs[flushed] = flushed, []
        for item in source._read(Position(0, 0, True, None, LOGICAL), 0.0):
            if type(item) is Idle:
                if not source._cur.messages:
                    break
                source._decoder.ends.clear()  # what the loop's ack does once the run is in Kafka
            elif type(item) is TxnRun:
                runs[flushed].append(len(item.txns))
    assert max(runs[0]) > 3
    assert set(runs[FIRST_LSN + 0x100_0000]) == {1} and len(runs[FIRST_LSN + 0x100_0000]) > 20


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("subset", [False, True])
def test_runs_stop_at_their_size_and_at_tables_captured_with_a_column_subset(subset, scan):
    needs_native(scan)
    tbl = table(True, TYPES[:3])
    messages = stream(workload(4, rows(34, 1500, True, TYPES[:3])), 13, odd=False)
    tags = [tbl.qualified, UNKEYED.qualified]
    sources = [StreamSource(tags, messages, runs, scan=scan) for runs in (False, True)]
    for source in sources:
        source._decoder.subset_tags = {UNKEYED.qualified} if subset else set()
    plain, with_runs = (source.items_until_idle(0) for source in sources)
    runs = [i for i in with_runs if type(i) is TxnRun]
    assert flat(with_runs) == flat(plain)
    assert list(sources[0]._decoder.ends) == list(sources[1]._decoder.ends)
    longest = max(len(r.records) for r in runs)
    assert longest <= 512 and (subset or longest >= 506)  # whole transactions of 1..6 changes, up to RUN_MAX
    unkeyed = {i for i, tag in enumerate(tags) if tag == UNKEYED.qualified}
    in_runs = [struct.unpack_from(">H", rec, 9)[0] for r in runs for rec in r.records]
    assert (unkeyed & set(in_runs)) == (set() if subset else unkeyed)


@pytest.mark.parametrize("scan", [False, True])
def test_transactions_the_committed_position_reaches_go_the_old_way(scan):
    needs_native(scan)
    tbl = table(True, TYPES)
    messages = stream(workload(6, rows(32, 120, True, TYPES)), 9)
    commits = [struct.unpack_from(">Q", m.payload, 1)[0] for m in messages if m is not None and m.payload[:1] == b"C"]
    committed = commits[len(commits) // 2]
    plain, with_runs, _, _ = both(messages, [tbl.qualified, UNKEYED.qualified], committed, scan=scan)
    runs = [i for i in with_runs if type(i) is TxnRun]
    assert runs and min(t.unit for r in runs for t in r.txns) > committed
    assert flat(with_runs) == flat(plain)


@pytest.mark.parametrize("scan", [False, True])
def test_a_transaction_begins_after_the_end_of_the_one_before(scan):
    needs_native(scan)
    tbl = table(True, TYPES[:4])
    messages = stream(workload(7, rows(33, 60, True, TYPES[:4])), 10)
    _, with_runs, _, _ = both(messages, [tbl.qualified, UNKEYED.qualified], scan=scan)
    txns = [t for i in with_runs if type(i) is TxnRun for t in i.txns]
    assert txns[0].last_lsn == FIRST_LSN - 8 or txns[0].last_lsn > FIRST_LSN
    commit_time = {m.payload[1:9]: m for m in messages if m is not None and m.payload[:1] == b"B"}
    for txn in txns:
        _, txid, ts_us = BEGIN_FIELDS.unpack_from(commit_time[struct.pack(">Q", txn.unit)].payload, 1)
        assert (txn.txid, txn.ts_us, txn.ts_ms) == (txid, ts_us + PG_EPOCH_US, (ts_us + PG_EPOCH_US) // 1000)
        assert (txn.prefix, txn.ordinal) == (position_prefix(LOGICAL, txn.unit), 0)


@every_form
def test_logical_txn_runs_through_the_lane_equal_their_items_relayed_one_by_one(use_avro, envelope, arrays):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    messages = stream(workload(9, rows(23, 300, True, types)), 4)
    plain, with_runs, _, _ = both(messages, [tbl.qualified, UNKEYED.qualified])
    em, want = emitter(tbl, use_avro, envelope)
    assert relay_items(em, want, plain, LOGICAL) == 0
    em, got = emitter(tbl, use_avro, envelope)
    laned = relay_items(em, got, with_runs, LOGICAL)
    assert got.produced == want.produced
    in_runs = sum(len(i.txns) for i in with_runs if type(i) is TxnRun)
    assert laned < in_runs  # some transactions were given back (arrays, unkeyed updates without old row)
    assert arrays or laned > in_runs // 6
    assert not any(type(i) is Change and i.op == "T" for i in flat(with_runs) if type(i) is TxnRun)


class LoopSource(StreamSource):
    """StreamSource as the relay loop reads it: the loop's table, acknowledged through
    LogicalSource.ack (standby feedback recorded by the cursor); stop is set once the stream is
    read and every transaction end is confirmed."""

    def __init__(self, messages: list[Message | None], txn_runs: bool, stop: threading.Event):
        super().__init__([TAG], messages, txn_runs)
        self._cur = FeedbackCursor(messages)
        self.stop, self.last_end = stop, max(COMMIT_FIELDS.unpack_from(m.payload, 1)[1] for m in messages
                                             if m is not None and m.payload[:1] == b"C")

    def handoff(self, export):
        return Position(0, 0, True, None, LOGICAL), None, {"skipped": True}

    def switch(self, record) -> None:
        pass

    def resume(self, position) -> None:
        pass

    def items(self, position):
        for item in self._read(position, 0.0):
            if type(item) is Idle and self._cur.flushed == self.last_end:
                self.stop.set()
            yield item

    def wait(self, timeout: float) -> None:
        pass

    def lag(self):
        return Lag()

    def close(self) -> None:
        pass


class FeedbackCursor(Cursor):
    def __init__(self, messages: list[Message | None]):
        super().__init__(messages)
        self.flushed = 0

    def send_feedback(self, write_lsn: int, flush_lsn: int, force: bool) -> None:
        assert flush_lsn >= self.flushed
        self.flushed = flush_lsn


@pytest.mark.parametrize("soft", [30, 20000])
def test_the_loop_relays_logical_txn_runs_as_it_relays_their_items(soft):
    rng = random.Random(11)
    records = [record(rng.choice("IU"), 0, [k, f"v{k}"]) for k in (rng.randint(1, 40) for _ in range(400))]
    messages = stream(records, 12)
    sinks, relays, begun = [], [], []
    for txn_runs in (False, True):
        sink = FakeSink()
        source = LoopSource(messages, txn_runs, threading.Event())
        relays.append(run(source, sink, soft=soft))
        assert source._cur.flushed == source.last_end  # every transaction confirmed, after its Kafka commit
        assert_transactions_whole(sink)
        begun.append(begins_first(sink))
        sinks.append({t: [m for m in sink.committed if m[0] == t] for t in {m[0] for m in sink.committed}})
    plain, laned = sinks
    truncates = sum(m is not None and m.payload[:1] == b"T" for m in messages)
    assert relays[0].changes == relays[1].changes == len(records) + truncates
    assert begun[1] > begun[0] + 20  # the lane wrote those transactions whole (BEGIN first)
    assert plain.keys() == laned.keys()
    for topic in plain:
        if not topic.endswith("positions"):
            assert laned[topic] == plain[topic], topic


def pgoutput_stream(changes: list[tuple[bytes, int]], seed: int) -> list[Message | None]:
    """pgoutput's I/U/D messages as transactions of 1..6 changes: Begin, changes, Commit (each with
    its own xid, commit LSN and time); now and then a Truncate among the changes, a pause inside or
    after a transaction."""
    rng, out, i, n = random.Random(seed), [], 0, 0
    lsn = FIRST_LSN
    while i < len(changes):
        size, commit_lsn, ts = rng.randint(1, 6), lsn + 0x100, 1_000_000 + 7_000 * n - PG_EPOCH_US
        out.append(Message(b"B" + struct.pack(">QqI", commit_lsn, ts, (TXID + n) & 0xFFFFFFFF), lsn))
        for data, start in changes[i:i + size]:
            if rng.random() < 0.03:
                out.append(Message(b"T" + struct.pack(">IBI", 1, 0, OID), lsn + 1))
            out.append(Message(data, start))
            if rng.random() < 0.05:
                out.append(None)
        out.append(Message(b"C" + struct.pack(">BQQq", 0, commit_lsn, commit_lsn + 8, ts), commit_lsn))
        if rng.random() < 0.2:
            out.append(None)
        i, n, lsn = i + size, n + 1, commit_lsn + 8
    return out


def pgoutput_decoder(tbl, monkeypatch) -> Callable[[], PgoutputDecoder]:
    def make() -> PgoutputDecoder:
        dec = in_transaction(tbl, monkeypatch)
        dec.feed(b"C" + struct.pack(">BQQq", 0, UNIT, UNIT + 8, 0), UNIT)  # in_transaction's, empty
        dec.ends.clear()
        return dec
    return make


@pytest.mark.parametrize("scan", [False, True])
@every_form
def test_pgoutput_txn_runs_give_the_items_and_messages_they_give_without(use_avro, envelope, arrays, scan,
                                                                         monkeypatch):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    tbl = pg_table(TYPES + MORE_ARRAYS if arrays else TYPES)
    messages = pgoutput_stream(pg_messages(7, tbl, 300), 5)
    plain, with_runs, ends, ends_laned = both(messages, [], decoder=pgoutput_decoder(tbl, monkeypatch), scan=scan)
    runs = [i for i in with_runs if type(i) is TxnRun]
    assert len(runs) > 5 and all(r.complete and len(r.records) <= 512 for r in runs)
    assert flat(with_runs) == flat(plain)
    assert ends_laned == ends and len(ends) == sum(m is not None and m.payload[:1] == b"C" for m in messages)
    em, want = emitter(tbl, use_avro, envelope)
    assert relay_items(em, want, plain, LOGICAL) == 0
    em, got = emitter(tbl, use_avro, envelope)
    laned = relay_items(em, got, with_runs, LOGICAL)
    assert got.produced == want.produced
    in_runs = sum(len(r.txns) for r in runs)
    assert laned < in_runs  # some transactions were given back (unchanged TOASTed values, arrays)
    assert arrays or laned > 2  # an update's unchanged TOASTed value (often here) gives its transaction back
