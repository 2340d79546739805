"""The relay loop (pgshovel2.relay.loop) over a fake source and a fake sink: resume after a crash
between the Kafka commit and the acknowledgement, skipping what the committed position covers,
splits of a batch and inside one huge transaction, control events switching set versions.

The fakes are of our own two interfaces (pgshovel2.relay.source.Source and the sink's produce /
commit / abort), not of PostgreSQL or Kafka: the integration tests run the same loop against
the real services."""

import json
import threading
import time
from collections import Counter

import pytest

from pgshovel2.backends.chunks import Chunk
from pgshovel2.catalog import Column, Table
from pgshovel2.config import SetConfig, TableConfig
from pgshovel2.errors import UnavailableError
from pgshovel2.relay.control import Switch
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.layout import Layout
from pgshovel2.relay.loop import Relay
from pgshovel2.relay.options import RelayOptions
from pgshovel2.relay.snapshot.online import OnlineSnapshot
from pgshovel2.relay.source import Begin, Change, Commit, Control, Idle, Lag
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import LOGICAL, TRIGGER, Position, parse_header

COLS = (Column("id", 1, "integer", "int4", False, False), Column("v", 2, "text", "text", False, True))
TABLE = Table("public", "t", COLS, ("id",), "primary key")
TABLE_V2 = Table("public", "t", (*COLS, Column("w", 3, "integer", "int4", False, True)), ("id",), "primary key")
CONFIG = SetConfig(dsn="host=localhost dbname=d", tables=(TableConfig("public", "t"),), encoding="json")
V1 = SetRecord.new("c", "s", CONFIG, (TABLE,))
V2 = V1.next(tables=(TABLE_V2,))
POSITIONS = V1.topics.positions
TAG = TABLE.qualified


class CrashError(Exception):
    """Stands for a SIGKILL at the point it is raised."""


class FakeSink:
    """Kafka as the loop sees it: produce into an open transaction, commit or abort it.
    committed: every (topic, key, value, headers) of committed transactions, in order."""

    def __init__(self) -> None:
        self.committed: list[tuple] = []
        self.open: list[tuple] = []
        self.produced = self.commits = 0
        self.crash_after_commit: int | None = None  # commit number after which a CrashError is raised

    def start(self) -> None:
        self.open = []

    def produce(self, topic, key, value, headers) -> None:
        self.open.append((topic, key, value, dict(headers)))
        self.produced += 1

    def produce_many(self, messages) -> None:
        for topic, key, value, headers in messages:
            self.produce(topic, key, value, headers)

    def commit(self) -> None:
        self.committed += self.open
        self.open = []
        self.commits += 1
        if self.commits == self.crash_after_commit:
            raise CrashError(f"after Kafka commit {self.commits}")

    def abort(self) -> None:
        self.open = []

    def close(self) -> None:
        self.open = []

    def ensure_topics(self, *args) -> list[str]:
        return []

    def position(self) -> Position | None:
        records = [v for t, _k, v, _h in self.committed if t == POSITIONS]
        return Position.decode(records[-1]) if records else None

    def data(self) -> list[tuple]:
        return [m for m in self.committed if m[0] == V1.topic(TABLE)]

    def txn_records(self) -> list[dict]:
        return [json.loads(v) for t, _k, v, _h in self.committed if t == V1.topics.transactions]


class FakeSource:
    """A source over units given as lists of transactions, each a (txid, [items]) with items
    ("I"|"U"|"D", id) changes or ("V", version) control events. kind "batch": a unit is a batch
    (PgQ: commit_delay 0, nothing read past an unacknowledged batch); kind "txn": a unit is one
    transaction (logical). acked: the last acknowledged position; stop is set once every unit is
    read and acknowledged."""

    def __init__(self, units: list[list[tuple]], kind: str, stop: threading.Event, acked: Position | None = None):
        self.units, self.kind, self.stop, self.acked = units, kind, stop, acked
        self.backend = TRIGGER if kind == "batch" else LOGICAL
        self.commit_delay = 0.0 if kind == "batch" else 0.02
        self.crash_on_ack = False
        self.idle_inside = False  # an Idle after each change (a server sending a transaction slowly)
        self.gap = 0.0  # s before each transaction: a busy source (no Idle) slower than the relay
        self.idle_between = False  # an Idle after each unit, 2 x commit_delay later (a source at a low rate)
        self.current = False  # transactions committed just now (else at ts 1 s after the epoch: a backlog)
        self.every = 0.0  # s between units' arrivals (a source at a steady rate: Idle until the next)
        self.idles = 0  # Idle items yielded while a unit was yet to arrive (each one wakes the relay)
        self._next = 0.0  # time.monotonic() the next unit arrives at (every)
        self.handoffs = 0
        self.width = len(V1.tables[0].columns)
        self.consistent_point: int | None = None  # logical: hand off as LogicalSource does, at this LSN

    def handoff(self, export):
        self.handoffs += 1
        if self.consistent_point is not None:
            return Position.at_consistent_point(self.consistent_point), None, {"skipped": True}
        return Position(0, 0, True, None, self.backend), None, {"skipped": True}

    def switch(self, record) -> None:
        pass

    def resume(self, position) -> None:
        pass

    def items(self, position):
        for number, unit in enumerate(self.units, start=1):
            if self.acked is not None and self.acked.reaches(number, 0, True):
                continue
            if self.every:
                self._next = (self._next or time.monotonic()) + self.every
                while time.monotonic() < self._next:
                    self.idles += 1
                    yield Idle(self._next - time.monotonic())
            ordinal = 0
            for i, (txid, events) in enumerate(unit):
                time.sleep(self.gap)
                yield Begin(txid, 1000, number, ordinal)
                for op, arg in events:
                    if op == "V":  # captured in version arg's layout from here on
                        self.width = len({1: V1, 2: V2}[arg].tables[0].columns)
                        yield Control(txid, 1000, "V", {"version": arg}, TAG, None, number, ordinal)
                    else:
                        row = [arg, f"v{arg}", arg * 10][:self.width]
                        yield Change(txid, 1000, op, row, TAG, None, number, ordinal)
                        if self.idle_inside:
                            time.sleep(2 * self.commit_delay)
                            yield Idle(0.0)
                    ordinal += 1
                yield Commit(txid, int(time.time() * 1000) if self.current else 1000, number, ordinal,
                             i == len(unit) - 1)
            if self.idle_between:
                time.sleep(2 * self.commit_delay)
                yield Idle(0.0)
            while self.kind == "batch" and not (self.acked and self.acked.reaches(number, 0, True)):
                yield Idle(0.0)
        while True:
            if self.acked is not None and self.acked.reaches(len(self.units), 0, True):
                self.stop.set()
            yield Idle(0.0)

    def ack(self, position: Position) -> None:
        if self.crash_on_ack:
            raise CrashError("between the Kafka commit and the acknowledgement")
        self.acked = position

    def wait(self, timeout: float) -> None:
        if self.every:
            time.sleep(max(0.0, min(timeout, self._next - time.monotonic())))

    def lag(self) -> Lag:
        return Lag(0.0, 0)

    def describe(self) -> str:
        return "fake"

    def close(self) -> None:
        pass


class FakeControl:
    """Set-version markers switch to the record of that version."""

    def apply(self, record, item):
        version = item.row["version"]
        return None if version <= record.version else Switch({1: V1, 2: V2}[version])


def run(source: FakeSource, sink: FakeSink, soft: int = 20000, latest: SetRecord = V1, busy: float = 0.25) -> Relay:
    """One relay over source and sink until the source is drained (or a CrashError); latest: the set's
    latest record in ZooKeeper; busy: the busy_commit_delay."""
    emitter = Emitter("s", {}, V1.topics.transactions, None, sink)
    layout = Layout(latest, emitter, None, {1: V1, 2: V2}.__getitem__, lambda *a: None)
    options = RelayOptions("kafka", snapshot="skip", max_transaction_messages=soft, busy_commit_delay=busy)
    relay = Relay("s", source, sink, layout, FakeControl(), options, sink.position, POSITIONS, b"c/s")
    relay.run(source.stop)
    return relay


def relaunch(units, kind: str, sink: FakeSink, acked: Position | None, soft: int = 20000,
             latest: SetRecord = V1) -> FakeSource:
    source = FakeSource(units, kind, threading.Event(), acked)
    run(source, sink, soft, latest)
    return source


def changes(sink: FakeSink) -> Counter:
    """(txid, id, op) of every committed data message, counted."""
    return Counter((int(h["pgshovel.txid"]), json.loads(k)["id"], h["pgshovel.op"]) for _t, k, _v, h in sink.data())


def assert_transactions_whole(sink: FakeSink) -> None:
    """Every source transaction has one BEGIN and one END whose count is its messages."""
    records = sink.txn_records()
    begins = Counter(r["txid"] for r in records if r["type"] == "BEGIN")
    ends = {r["txid"]: r["event_count"] for r in records if r["type"] == "END"}
    per_txn = Counter(int(h["pgshovel.txid"]) for *_x, h in sink.data())
    assert set(begins.values()) == {1} and begins.keys() == ends.keys() == per_txn.keys()
    assert ends == dict(per_txn)


BATCHES = [[(11, [("I", 1), ("I", 2)]), (12, [("U", 1)])],
           [(13, [("I", 3)]), (14, [("D", 2)])]]


@pytest.mark.parametrize("kind", ["batch", "txn"])
def test_relays_every_change_once_and_acknowledges_each_unit(kind):
    units = BATCHES if kind == "batch" else [[t] for unit in BATCHES for t in unit]
    sink, stop = FakeSink(), threading.Event()
    source = FakeSource(units, kind, stop)
    run(source, sink)
    assert changes(sink) == Counter({(11, 1, "c"): 1, (11, 2, "c"): 1, (12, 1, "u"): 1, (13, 3, "c"): 1,
                                     (14, 2, "d"): 1})
    assert_transactions_whole(sink)
    assert source.acked.unit == len(units) and source.acked.complete
    assert (sink.position().unit, sink.position().complete) == (len(units), True)


def test_a_transaction_committed_at_the_slots_consistent_point_is_relayed():
    # units are numbered from 1: the first transaction's commit record starts at the consistent point
    sink, stop = FakeSink(), threading.Event()
    source = FakeSource([[t] for unit in BATCHES for t in unit], "txn", stop)
    source.consistent_point = 1
    run(source, sink)
    assert changes(sink)[(11, 1, "c")] == changes(sink)[(11, 2, "c")] == 1
    assert len(changes(sink)) == 5


def test_crash_between_commit_and_ack_is_only_acknowledged_on_restart():
    sink, stop = FakeSink(), threading.Event()
    source = FakeSource(BATCHES, "batch", stop)
    source.crash_on_ack = True
    with pytest.raises(CrashError):
        run(source, sink)
    assert source.acked is None and sink.position().unit == 1 and sink.position().complete
    before = len(sink.committed)
    source = relaunch(BATCHES, "batch", sink, acked=None)
    assert changes(sink) == Counter({(11, 1, "c"): 1, (11, 2, "c"): 1, (12, 1, "u"): 1, (13, 3, "c"): 1,
                                     (14, 2, "d"): 1})
    assert_transactions_whole(sink)
    assert source.acked.unit == 2 and len(sink.committed) > before


def test_units_the_committed_position_covers_are_skipped():
    sink = FakeSink()
    source = relaunch(BATCHES[:1], "batch", sink, acked=None)
    assert source.acked.unit == 1
    # a later start whose source still has batch 1 unacknowledged (its ack was lost): skipped, acknowledged
    source = relaunch(BATCHES, "batch", sink, acked=None)
    assert Counter(changes(sink).values()) == Counter({1: 5})
    assert source.acked.unit == 2


def test_a_batch_is_split_over_kafka_transactions_at_transaction_ends():
    batch = [[(100 + i, [("I", 2 * i), ("I", 2 * i + 1)]) for i in range(5)]]
    sink = FakeSink()
    source = relaunch(batch, "batch", sink, acked=None, soft=5)
    # position records: after the handoff, then at transaction ends once 5+ messages are open, then the end
    positions = [Position.decode(v) for t, _k, v, _h in sink.committed if t == POSITIONS]
    assert [(p.ordinal, p.complete) for p in positions[1:]] == [(4, False), (8, False), (10, True)]
    assert source.acked == Position(1, 10, True, None, TRIGGER)
    assert_transactions_whole(sink)
    assert len(changes(sink)) == 10


def test_a_huge_transaction_is_split_and_resumes_after_its_committed_part():
    unit = [[(7, [("I", i) for i in range(50)])]]
    sink = FakeSink()
    sink.crash_after_commit = 3  # the handoff, a split once 20 messages are open (BEGIN + 19), another: crash
    with pytest.raises(CrashError):
        run(FakeSource(unit, "txn", threading.Event()), sink, soft=2)
    assert (sink.position().ordinal, sink.position().complete) == (39, False)
    assert len(sink.data()) == 39 and not [r for r in sink.txn_records() if r["type"] == "END"]
    sink.crash_after_commit = None
    source = relaunch(unit, "txn", sink, acked=None, soft=2)
    assert Counter(changes(sink).values()) == Counter({1: 50})
    assert_transactions_whole(sink)  # one BEGIN (written before the crash), END counts all 50
    assert source.acked.complete


def test_control_events_switch_versions_exactly_where_they_are():
    batch = [[(21, [("I", 1)]), (22, [("V", 2), ("I", 2)]), (23, [("I", 3)])]]
    sink = FakeSink()
    relaunch(batch, "batch", sink, acked=None)
    versions = {json.loads(k)["id"]: h["pgshovel.version"] for _t, k, _v, h in sink.data()}
    columns = {json.loads(k)["id"]: sorted(json.loads(v)) for _t, k, v, _h in sink.data()}
    assert versions == {1: "1", 2: "2", 3: "2"}
    assert columns[1] == ["id", "v"] and columns[2] == columns[3] == ["id", "v", "w"]
    assert sink.position().set_version == 2


def test_a_restart_replays_a_partly_committed_batch_in_the_version_it_started_in():
    batch = [[(31, [("I", 1)]), (32, [("V", 2), ("I", 2)]), (33, [("I", 3)]), (34, [("I", 4)])]]
    sink = FakeSink()
    sink.crash_after_commit = 3  # the handoff, two splits at transaction ends (soft 1): crash
    with pytest.raises(CrashError):
        run(FakeSource(batch, "batch", threading.Event()), sink, soft=1)
    committed = sink.position()
    assert not committed.complete and committed.batch_version == 1 and committed.set_version == 2
    sink.crash_after_commit = None
    relaunch(batch, "batch", sink, acked=None, soft=1, latest=V2)  # ZooKeeper is at version 2 by now
    versions = Counter((json.loads(k)["id"], h["pgshovel.version"]) for _t, k, _v, h in sink.data())
    assert versions == Counter({(1, "1"): 1, (2, "2"): 1, (3, "2"): 1, (4, "2"): 1})
    assert_transactions_whole(sink)


def test_logical_transactions_share_a_kafka_transaction_and_are_acked_together():
    units = [[(41 + i, [("I", i)])] for i in range(6)]
    sink = FakeSink()
    source = relaunch(units, "txn", sink, acked=None)
    # the fake source delivers all six at once: at most a few Kafka commits after the handoff, not six
    assert sink.commits <= 1 + 3 and source.acked.unit == 6
    assert Counter(changes(sink).values()) == Counter({1: 6})


def test_a_pause_inside_a_transaction_commits_nothing_its_position_does_not_cover():
    # 52 arrives in pieces while 51 waits out its commit delay: a Kafka commit at 51's end then held
    # 52's BEGIN and first change, and the restart wrote them again (found by make chaos, logical)
    units = [[(51, [("I", 1)])], [(52, [("I", 2), ("I", 3)])]]
    sink = FakeSink()
    sink.crash_after_commit = 2  # the handoff, then the first commit after it: crash
    source = FakeSource(units, "txn", threading.Event())
    source.idle_inside = True
    with pytest.raises(CrashError):
        run(source, sink)
    committed = sink.position()
    for *_x, headers in sink.data():
        _backend, unit, _snapshot, ordinal = parse_header(headers["pgshovel.position"])
        assert committed.covers(unit, ordinal), f"{headers['pgshovel.position']} in Kafka past {committed}"
    relaunch(units, "txn", sink, acked=None)
    assert Counter(changes(sink).values()) == Counter({1: 3})
    assert_transactions_whole(sink)


class CountingSource(FakeSource):
    """A FakeSource that counts the calls of resume."""

    resumes = 0

    def resume(self, position) -> None:
        self.resumes += 1


class IdleChunks:
    """The ChunkReader as OnlineSnapshot uses it: empty chunks, watermarks that reach no stream."""

    def estimate(self, table) -> int:
        return 0

    def watermark(self, payload) -> None:
        pass

    def read(self, table, last_key, where, limit):
        return Chunk([], None)

    def close(self) -> None:
        pass


def test_snapshot_option_on_a_resumable_set_requests_an_online_snapshot_and_checks_the_source_once():
    sink = FakeSink()
    relaunch(BATCHES, "batch", sink, None)
    stored: dict = {}
    online = OnlineSnapshot("s", lambda: (stored.get("request"), 0), lambda data, v: stored.update(request=data),
                            lambda stats: None, IdleChunks(), lambda table: lambda row: str(row[0]).encode())
    source = CountingSource(BATCHES, "batch", threading.Event(), sink.position())
    emitter = Emitter("s", {}, V1.topics.transactions, None, sink)
    layout = Layout(V1, emitter, None, {1: V1, 2: V2}.__getitem__, lambda *a: None)
    relay = Relay("s", source, sink, layout, FakeControl(), RelayOptions("kafka", snapshot="force"), sink.position,
                  POSITIONS, b"c/s", online=online)
    relay.run(source.stop)
    assert stored["request"]["state"] == "active" and source.handoffs == 0
    assert source.resumes == 1


def test_a_backlog_fills_one_kafka_transaction_up_to_busy_commit_delay():
    # each old transaction comes 30 ms after the last without an Idle (a backlog read slower than
    # 20 ms a transaction): one Kafka transaction for all eight, not one per 20 ms
    units = [[(61 + i, [("I", i)])] for i in range(8)]
    sink = FakeSink()
    source = FakeSource(units, "txn", threading.Event())
    source.gap = 0.03
    run(source, sink, busy=30.0)
    assert sink.commits == 1 + 1 and source.acked.unit == 8  # the handoff, then one
    assert Counter(changes(sink).values()) == Counter({1: 8})
    assert_transactions_whole(sink)


def test_a_backlog_still_commits_at_busy_commit_delay_and_max_transaction_messages():
    units = [[(61 + i, [("I", i)])] for i in range(8)]
    sink = FakeSink()
    source = FakeSource(units, "txn", threading.Event())
    source.gap = 0.03
    run(source, sink, busy=0.0)  # 0: commit_delay (20 ms) as for an idle source
    assert sink.commits >= 1 + 3
    sink2 = FakeSink()
    source2 = FakeSource(units, "txn", threading.Event())
    source2.gap = 0.03
    run(source2, sink2, soft=3 * 3, busy=30.0)  # BEGIN, change, END: a commit at every third transaction
    assert sink2.commits == 1 + 3
    for s in (sink, sink2):
        assert Counter(changes(s).values()) == Counter({1: 8})
        assert_transactions_whole(s)


def test_a_source_that_goes_idle_commits_after_commit_delay_whatever_busy_commit_delay():
    units = [[(71 + i, [("I", i)])] for i in range(4)]
    sink = FakeSink()
    source = FakeSource(units, "txn", threading.Event())
    source.idle_between = True
    run(source, sink, busy=30.0)
    assert sink.commits == 1 + 4 and source.acked.unit == 4
    assert Counter(changes(sink).values()) == Counter({1: 4})


def test_a_source_that_keeps_up_commits_after_commit_delay_without_going_idle():
    # transactions committed just now, 30 ms apart, no Idle: the relay is not behind, so each
    # Kafka transaction ends commit_delay (20 ms) after its first point, whatever busy_commit_delay
    units = [[(81 + i, [("I", i)])] for i in range(8)]
    sink = FakeSink()
    source = FakeSource(units, "txn", threading.Event())
    source.gap, source.current = 0.03, True
    run(source, sink, busy=30.0)
    assert sink.commits >= 1 + 3 and source.acked.unit == 8
    assert Counter(changes(sink).values()) == Counter({1: 8})
    assert_transactions_whole(sink)


def test_a_source_at_a_steady_rate_wakes_the_relay_once_a_kafka_transaction_not_once_a_unit():
    # a transaction every 4 ms, commit_delay 20 ms: the relay sleeps out the delay and then reads
    # what came meanwhile into the same Kafka transaction, rather than waking at each arrival
    units = [[(91 + i, [("I", i)])] for i in range(30)]
    sink = FakeSink()
    source = FakeSource(units, "txn", threading.Event())
    source.every, source.current = 0.004, True
    run(source, sink, busy=30.0)
    assert source.idles <= len(units) // 2
    assert 1 + 2 <= sink.commits <= 1 + len(units) // 3 and source.acked.unit == len(units)
    assert Counter(changes(sink).values()) == Counter({1: len(units)})
    assert_transactions_whole(sink)


def test_an_online_snapshot_step_does_not_read_its_request_while_zookeeper_is_away():
    reads, connected = [], [False]
    online = OnlineSnapshot("s", lambda: reads.append(1) or (None, 0), lambda data, v: None, lambda stats: None,
                            IdleChunks(), lambda table: lambda row: b"", reachable=lambda: connected[0])
    online.step(V1)
    assert reads == []  # a read would block the loop until ZooKeeper is back, then fail
    online._next_poll = 0.0
    connected[0] = True
    online.step(V1)
    assert reads == [1]


def test_an_online_snapshot_step_polls_again_later_when_zookeeper_drops_during_its_read():
    reads = []

    def load():
        reads.append(1)
        if len(reads) == 1:
            raise UnavailableError("cannot read the online snapshot request of set 's' in ZooKeeper: ConnectionLoss")
        return None, 0

    online = OnlineSnapshot("s", load, lambda data, v: None, lambda stats: None, IdleChunks(),
                            lambda table: lambda row: b"")
    online.step(V1)  # the loop goes on: no restart of the relay for a poll
    assert reads == [1] and online.chunk is None
    online.step(V1)
    assert reads == [1]  # not before the poll interval
    online._next_poll = 0.0
    online.step(V1)
    assert reads == [1, 1]
