"""The relay loop's bookkeeping (pgshovel2.relay.commits): the cursor's change headers are the wire's
for both backends across unit switches, and Commits holds, times and commits points as the loop
relies on (a fake of our own sink interface: produce / commit, counted)."""

from dataclasses import replace

from pgshovel2.relay.commits import Commits, Cursor
from pgshovel2.relay.emit.tally import TableTally
from pgshovel2.relay.options import RelayOptions
from pgshovel2.wire import LOGICAL, TRIGGER, Position, change_header


class CountingSink:
    """The sink's produce / commit as Commits uses them: produced counts messages; committed keeps
    the (topic, key, value) of each commit's messages."""

    def __init__(self) -> None:
        self.produced, self.open, self.committed = 0, [], []

    def produce(self, topic, key, value, headers) -> None:
        self.open.append((topic, key, value))
        self.produced += 1

    def commit(self) -> None:
        self.committed.append(self.open)
        self.open = []


def test_cursor_headers_are_the_wire_headers_across_units():
    for backend, units in ((TRIGGER, [7, 7, 8, 7]), (LOGICAL, [0x16B3740, 0x16B3740, 0x16B3798])):
        cursor = Cursor(backend)
        for unit in units:
            for ordinal in (0, 1, 41):
                assert cursor.header(unit, ordinal) == change_header(backend, unit, ordinal)


def test_cursor_keeps_the_version_a_unit_started_in():
    cursor = Cursor(TRIGGER)
    cursor.at_unit(5, 1)
    cursor.at_unit(5, 2)  # a set version switched inside the unit
    assert cursor.unit_version == 1
    cursor.at_unit(6, 2)
    assert (cursor.unit, cursor.unit_version) == (6, 2)


def _commits(soft: int = 3) -> tuple[Commits, CountingSink]:
    sink = CountingSink()
    options = RelayOptions("kafka", max_transaction_messages=soft, busy_commit_delay=60.0)
    commits = Commits("s", sink, TRIGGER, 60.0, options, "c.positions", b"c/s", TableTally())
    commits.committed = Position(1, 0, True, None, TRIGGER)
    return commits, sink


def test_a_kafka_transaction_ends_at_soft_messages_and_commits_its_position_last():
    commits, sink = _commits(soft=3)
    for _ in range(2):
        sink.produce("t", b"k", b"v", [])
    commits.hold(commits.point(2, 2, True))
    assert not commits.due(True, 0)  # 2 messages, the clock not due (60 s)
    sink.produce("t", b"k", b"v", [])
    assert commits.pending() == 3 and commits.due(False, 0)
    commits.changes = 3
    position = commits.commit(commits.ready, lambda: None)
    topic, key, value = sink.committed[0][-1]  # the position record last (committed_at_ms: when it was encoded)
    assert (topic, key, replace(Position.decode(value), committed_at_ms=0)) == ("c.positions", b"c/s", position)
    assert commits.committed == position and commits.pending() == 0 and commits.batches == 1
    commits.next_transaction()
    assert commits.ready is None and commits.clock.ready_at == 0.0


def test_a_failed_leadership_check_commits_nothing():
    commits, sink = _commits()
    sink.produce("t", b"k", b"v", [])

    def lost() -> None:
        raise RuntimeError("another relay took over")

    try:
        commits.commit(commits.point(2, 1, True), lost)
    except RuntimeError:
        pass
    assert sink.committed == [] and commits.committed.unit == 1 and commits.batches == 0
