"""The relay loop's bookkeeping of Kafka transactions (:class:`Commits`) and of where it is in the
source's stream (:class:`Cursor`), shared by the item path (:mod:`pgshovel2.relay.loop`) and the
native lane's path (:mod:`pgshovel2.relay.runs`).

A Kafka transaction holds the messages of the stream up to a point and, last, the position record
saying so (pgshovel2.wire.Position); :meth:`Commits.commit` commits both at once. ``ready`` is the
latest point the open transaction may end at; ``committed`` the position of the last commit.
"""

import time
from collections.abc import Callable

from pgshovel2 import failpoints
from pgshovel2.relay.commit_clock import CommitClock
from pgshovel2.relay.emit.tally import TableTally
from pgshovel2.relay.monitor import metrics
from pgshovel2.relay.options import RelayOptions
from pgshovel2.relay.source import Begin
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.wire import Position, change_header_at, position_prefix


class OpenTxn:
    """The source transaction being relayed: BEGIN is written at its first change (begun);
    last_header: the change header of its last change written, last_covered: whether that one was
    covered by the committed position (replayed muted)."""

    __slots__ = ("begin", "begun", "last_header", "last_covered")

    def __init__(self, begin: Begin):
        self.begin, self.begun, self.last_header, self.last_covered = begin, False, "", False


class Cursor:
    """Where the loop is in the stream: the open source transaction (``txn``, None between
    transactions), the unit being relayed with the set version at its start (``unit_version``, the
    position's batch_version), and the position prefix of a unit (wire.position_prefix, cached for
    the last unit asked). backend: the source's (wire.TRIGGER or wire.LOGICAL)."""

    __slots__ = ("backend", "txn", "unit", "unit_version", "prefix_unit", "prefix")

    def __init__(self, backend: str):
        self.backend = backend
        self.txn: OpenTxn | None = None
        self.unit: int | None = None
        self.unit_version = 0
        self.prefix_unit, self.prefix = -1, ""

    def at_unit(self, unit: int, version: int) -> None:
        """An item of unit: a new unit starts at set version (the layout's now)."""
        if unit != self.unit:
            self.unit, self.unit_version = unit, version

    def prefix_of(self, unit: int) -> str:
        """The position prefix (wire.position_prefix) of unit, kept for the next call."""
        if unit != self.prefix_unit:
            self.prefix_unit, self.prefix = unit, position_prefix(self.backend, unit)
        return self.prefix

    def header(self, unit: int, ordinal: int) -> str:
        """The change header (wire.change_header) of event ordinal of unit."""
        return change_header_at(self.prefix_of(unit), ordinal)


class Commits:
    """The Kafka transactions of one relay: what is committed (``committed``), the point the open
    one may end at (``ready``), when it ends (``clock``: a CommitClock; ``soft``: at a transaction
    boundary once it holds that many messages, ``hard``: inside one source transaction at ten times
    that), and the counts (``changes`` relayed, ``batches``: Kafka transactions committed) with their
    metrics. sink: the set's transactional producer; backend: the source's; tally: the emitter's
    per-table counts, published with the other metrics at each commit."""

    def __init__(self, set_name: str, sink: KafkaSink, backend: str, commit_delay: float, options: RelayOptions,
                 position_topic: str, position_key: bytes, tally: TableTally):
        self.set_name, self.sink, self.backend, self.tally = set_name, sink, backend, tally
        self.position_topic, self.position_key = position_topic, position_key
        self.soft = options.max_transaction_messages
        self.hard = 10 * self.soft
        self.clock = CommitClock(commit_delay, options.busy_commit_delay)
        self.committed: Position | None = None
        self.ready: Position | None = None  # the latest point a Kafka transaction may end at, uncommitted
        self.changes = self.batches = 0
        self._counted = 0  # changes already added to the metric
        self._produced = 0  # sink.produced at the last commit
        self._m_commit = metrics.COMMIT_SECONDS.labels(set_name)

    def point(self, unit: int, ordinal: int, complete: bool) -> Position:
        """The position of a point of the stream (the committed one's txid snapshot)."""
        return Position(unit, ordinal, complete, self.committed.txid_snapshot, self.backend)

    def pending(self) -> int:
        """Messages produced since the last commit."""
        return self.sink.produced - self._produced

    def hold(self, point: Position) -> None:
        """The open Kafka transaction may end at point now."""
        self.ready = point
        if point.complete:
            self.clock.complete_point()

    def due(self, complete: bool, ts_ms: int) -> bool:
        """Whether the open Kafka transaction ends at the point just held: it holds soft messages,
        or the point is complete and the clock says so (CommitClock.due; ts_ms: its source commit)."""
        return self.pending() >= self.soft or (complete and self.clock.due(ts_ms))

    def commit(self, position: Position, before: Callable[[], None]) -> Position:
        """Commit the open Kafka transaction with position as its last record, after before() (the
        leadership check); returns position. Raises what the sink raises (FencedError,
        UnavailableError, RelayError): then nothing of the transaction is visible."""
        self.sink.produce(self.position_topic, self.position_key, position.encode(), [])
        before()
        failpoints.hit("before_commit")
        started = time.perf_counter()
        self.sink.commit()
        self._m_commit.observe(time.perf_counter() - started)
        failpoints.hit("after_commit")
        self._produced = self.sink.produced
        self.committed = position
        self.batches += 1
        metrics.BATCHES.labels(self.set_name).inc()
        metrics.CHANGES.labels(self.set_name).inc(self.changes - self._counted)
        self._counted = self.changes
        metrics.add_table_counts(self.set_name, self.tally.take(), time.time())
        return position

    def next_transaction(self) -> None:
        """After a commit at a point of the stream: no point held, the clock starts anew."""
        self.ready = None
        self.clock.reset()
