"""The relay loop: PgQ batches -> one Kafka transaction -> pgq.finish_batch.

Exactly-once: the messages of a batch and a position record (see
pgshovel2.relay.positions) are committed in one Kafka transaction, and the
batch is acknowledged in PgQ only after that commit. A relay restarted after
a crash fences its predecessor (same transactional id), reads the committed
position and skips what is already in Kafka: a batch that was committed but
not acknowledged is only acknowledged, a batch split over several Kafka
transactions resumes after the last committed event.

A batch is split when it grows past ``max_transaction_messages``: at the next
source-transaction boundary, or, inside one huge source transaction, at ten
times that size, so Kafka transactions stay bounded.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pgshovel2 import failpoints, names
from pgshovel2.capture.trigger import CONSUMER
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig
from pgshovel2.errors import SchemaChangeError
from pgshovel2.relay import metrics, setup, snapshot
from pgshovel2.relay.control import CONTROL_OPS, SET_VERSION, Control
from pgshovel2.relay.election import Leadership
from pgshovel2.relay.emitter import Emitter, TableRoute
from pgshovel2.relay.envelopes import SnapshotMarks
from pgshovel2.relay.pgq_source import Batch, Event, PgqSource
from pgshovel2.relay.positions import Position, read_position
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelayOptions:
    """Relay settings.

    snapshot: 'auto' (first start only), 'force' or 'skip'. poll_interval,
    progress_interval: seconds. transactional: Kafka transactions
    (exactly-once) or the idempotent-only producer (at-least-once).
    max_transaction_messages: soft size bound of one Kafka transaction.
    """

    bootstrap: str
    registry_url: str | None = None
    snapshot: str = "auto"
    poll_interval: float = 0.02
    progress_interval: float = 10.0
    transactional: bool = True
    max_transaction_messages: int = 20000
    slot_lag_warn_bytes: int = 1 << 30  # logical backend: warn when the slot lags more WAL than this
    heartbeat_interval: float = 10.0  # logical backend: seconds idle before a heartbeat message


class _StopRequestedError(Exception):
    """Raised inside the snapshot when a stop was requested."""


class _Discard:
    """A sink that drops messages: replays already-committed events to rebuild counts."""

    def produce(self, *args: object) -> None:
        pass


def _position(tick: int, ordinal: int) -> str:
    """Sortable position of a change: ``<cur tick id>:<ordinal in batch>``, zero-padded."""
    return f"{tick:020d}:{ordinal:010d}"


def _snapshot_position(tick: int, ordinal: int) -> str:
    """Position of a snapshot row: after every change up to tick, before the next batch."""
    return f"{tick:020d}:s{ordinal:010d}"


def transactional_id(cluster: str, set_name: str) -> str:
    """The Kafka transactional id of a set's relay (the same for every instance)."""
    return f"pgshovel2.{cluster}.{set_name}"


class Relay:
    """Relays one set until stop is set.

    Raises UnavailableError when a service goes away (retrying is safe),
    FencedError when another relay took over, RelayError/EncodeError when it
    cannot go on without losing or garbling a change, SchemaChangeError at a
    DDL it cannot relay compatibly.

    The set's layout (tables, columns, schemas) is that of the set version in
    effect at the committed position (Position.set_version; the latest version
    when unknown), switched at the control events of the queue
    (:mod:`pgshovel2.relay.control`).
    """

    def __init__(self, store: ClusterStore, set_name: str, options: RelayOptions,
                 leadership: Leadership | None = None):
        self.store, self.set_name, self.options = store, set_name, options
        self.leadership = leadership
        self._m_commit = metrics.COMMIT_SECONDS.labels(set_name)
        self._m_changes = metrics.CHANGES.labels(set_name)
        self._m_batches = metrics.BATCHES.labels(set_name)
        record, _ = store.get_set(set_name)
        self._use_record(record)
        self.queue = self._source_name(record)
        prefix = self.config.topic_prefix or set_name
        self.positions_topic = names.positions_topic(prefix)
        self.position_key = f"{store.cluster}/{set_name}".encode()
        tx_id = transactional_id(store.cluster, set_name) if options.transactional else None
        self.sink = KafkaSink(options.bootstrap, tx_id)
        self._create_topics(prefix)
        self.registry = SchemaRegistry(options.registry_url) if options.registry_url else None
        self.control = Control(store, set_name, self.registry)
        self.emitter = Emitter(set_name, {}, names.transactions_topic(prefix), None, self.sink)
        self._batch_version = self.set_version
        self.source = self._open_source()
        self.position: Position | None = None
        self.changes = self.batches = 0
        self._committed_produced = 0
        self._started = time.monotonic()
        self._last_progress = self._started

    def _source_name(self, record: dict[str, Any]) -> str:
        """Where the set's changes come from: its PgQ queue."""
        return record["queue"]

    def _open_source(self) -> PgqSource:
        return PgqSource(self.config.dsn, self.queue, CONSUMER)

    def _use_record(self, record: dict[str, Any]) -> None:
        self.record, self.set_version = record, record["version"]
        self.config = SetConfig.from_dict(record["config"])
        self.tables = tuple(Table.from_dict(t) for t in record["tables"])

    def _switch(self, record: dict[str, Any], route: TableRoute | None = None) -> None:
        """Relay in the layout of set record from here on: only route's table changed, or
        (route None) every route rebuilt and missing topics created."""
        self._use_record(record)
        if route is not None:
            self.emitter.switch_table(route, self.set_version)
            return
        self._create_topics(self.config.topic_prefix or self.set_name)
        routes, txn_writer = setup.routes(self.set_name, self.config, self.tables, self.registry)
        self.emitter.switch(routes, self.set_version, txn_writer)

    def _record_at(self, position: Position | None) -> dict[str, Any]:
        """The set record in effect at position: the latest one unless the position says otherwise."""
        version = position.start_version() if position is not None and self.options.snapshot != "force" else 0
        if not version or version == self.set_version:
            return self.record
        log.info("resuming in the layout of set version %d (the latest is %d)", version, self.set_version)
        return self.store.get_version(self.set_name, version)

    def _create_topics(self, prefix: str) -> None:
        topics = setup.topics(self.set_name, self.config, self.tables)
        topics[self.positions_topic] = "compact"
        single = frozenset({names.transactions_topic(prefix), self.positions_topic})
        for topic in self.sink.ensure_topics(topics, self.config.topics, single):
            log.info("created topic %s", topic)

    def run(self, stop: threading.Event) -> None:
        """Fence older relays, snapshot if needed, then relay batches until stop is set."""
        try:
            self.sink.start()
            position = read_position(self.options.bootstrap, self.positions_topic, self.position_key.decode())
            self._switch(self._record_at(position))
            try:
                self.position = self._handoff(stop, position)
            except _StopRequestedError:
                log.info("stopped during the snapshot; nothing of it is visible, it restarts on the next start")
                return
            while not stop.is_set():
                self._check_leadership()
                batch = self.source.next_batch()
                if batch is None:
                    if not self.source.tick():  # a new tick means a batch is ready now
                        stop.wait(self.options.poll_interval)
                else:
                    self._relay_batch(batch)
                self._progress()
        finally:
            self.source.close()
            self.sink.close()

    def _handoff(self, stop: threading.Event, position: Position | None) -> Position:
        mode = self.options.snapshot
        if mode == "force" or (position is None and mode == "auto"):
            return self._snapshot(stop)
        if position is None:
            log.info("skipping the initial snapshot: relaying queued changes only")
            position = self._commit(Position(self.source.last_tick(), 0, True, None))
            self.store.put_relay_record(self.set_name, "snapshot", {"txid_snapshot": None, "skipped": True})
            return position
        log.info("resuming after tick %d (event %d, batch %s), handoff txid snapshot %s", position.tick,
                 position.ordinal, "complete" if position.complete else "partial", position.txid_snapshot)
        return position

    def _snapshot(self, stop: threading.Event) -> Position:
        log.info("taking the initial snapshot of %d table(s)", len(self.tables))
        tick = self.source.last_tick()
        txid_snapshot, rows, now_ms, seconds = self._emit_snapshot(stop, lambda o: _snapshot_position(tick, o))
        position = self._commit(Position(tick, 0, True, txid_snapshot))
        self.store.put_relay_record(self.set_name, "snapshot", {
            "txid_snapshot": txid_snapshot, "rows": rows, "taken_at_ms": now_ms, "tick": tick})
        log.info("snapshot done: %d rows in %.1fs, handoff at txid snapshot %s", rows, seconds, txid_snapshot)
        return position

    def _emit_snapshot(self, stop: threading.Event, position_of: Callable[[int], str], lsn: int | None = None,
                       **take: str) -> tuple[str | None, int, int, float]:
        """Produce every table's rows as op ``r`` (pgshovel2.relay.snapshot.take, options take) into
        the open Kafka transaction; position_of(ordinal) gives each row's position, lsn the LSN the
        snapshot is at (logical backend), and SnapshotMarks each row's Debezium snapshot marker.

        Returns (what take returns: the txid snapshot, rows, capture time in ms, seconds).
        Aborts the Kafka transaction on any error; raises _StopRequestedError when stop is set.
        """
        now_ms, started, rows = int(time.time() * 1000), time.monotonic(), 0
        marks = SnapshotMarks(lambda item, marker: self.emitter.snapshot_row(*item, now_ms, marker, lsn))

        def emit(table: Table, row: list, ordinal: int) -> None:
            nonlocal rows
            if stop.is_set():
                raise _StopRequestedError()
            marks.add(table.qualified, (table, row, position_of(ordinal)))
            rows += 1

        def progress(table: Table, done: int, total: int) -> None:
            log.info("snapshot %s: %d/%d rows (%.0f rows/s)", table.qualified, done, total,
                     rows / max(time.monotonic() - started, 1e-6))

        try:
            result = snapshot.take(self.config.dsn, self.tables, emit, progress, **take)
            marks.finish()
        except BaseException:
            self.sink.abort()
            raise
        return result, rows, now_ms, time.monotonic() - started

    def _commit(self, position: Position) -> Position:
        """Commit the open Kafka transaction with position as its last record."""
        position = replace(position, set_version=self.set_version, batch_version=self._batch_version)
        self.sink.produce(self.positions_topic, self.position_key, position.encode(), [])
        self._check_leadership()
        failpoints.hit("before_commit")
        started = time.perf_counter()
        self.sink.commit()
        self._m_commit.observe(time.perf_counter() - started)
        failpoints.hit("after_commit")
        self._committed_produced = self.sink.produced
        self.position = position
        return position

    def _check_leadership(self) -> None:
        if self.leadership is not None:
            self.leadership.check()

    def _relay_batch(self, batch: Batch) -> None:
        assert self.position is not None
        if self.position.covers(batch.cur_tick_id):
            log.info("batch of ticks %d..%d is already in Kafka (committed before a restart): "
                     "acknowledging it", batch.prev_tick_id, batch.cur_tick_id)
            self.source.finish(batch)
            return
        self._batch_version = self.set_version
        skip = self.position.skip(batch.cur_tick_id)
        if skip:
            log.info("resuming batch of ticks %d..%d after its first %d events (already in Kafka)",
                     batch.prev_tick_id, batch.cur_tick_id, skip)
        events = self._emit_batch(batch, skip)
        # Even an empty batch commits its position: the commit is what proves this relay still owns
        # the set (a fenced one fails here), so only the owner ever acknowledges a batch.
        self._commit(self._batch_position(batch, events, complete=True))
        failpoints.hit("before_finish")
        self.source.finish(batch)
        self.changes += events - skip
        self.batches += 1
        self._m_changes.inc(events - skip)
        self._m_batches.inc()
        log.debug("batch %d (ticks %d..%d): %d changes", batch.batch_id,
                  batch.prev_tick_id, batch.cur_tick_id, events - skip)

    def _emit_batch(self, batch: Batch, skip: int) -> int:
        """Produce a batch's messages from event skip on; returns its event count."""
        soft = self.options.max_transaction_messages
        current, ordinal, last = None, 0, ("", 0)
        discard = _Discard()
        for ev in self.source.events(batch, self.position.txid_snapshot):
            position = _position(batch.cur_tick_id, ordinal)
            if ev.op in CONTROL_OPS:
                try:
                    self._control(ev, batch.cur_tick_id)
                except SchemaChangeError:
                    if ordinal >= skip:  # commit everything before the change; the batch stays unacknowledged
                        if current is not None and ev.txid != current:
                            self.emitter.sink = discard if ordinal <= skip else self.sink
                            self.emitter.end(current, *last)
                        self.emitter.sink = self.sink
                        self._commit(self._batch_position(batch, ordinal, complete=False))
                    raise
                ordinal += 1
                continue
            if ev.txid != current:
                if current is not None:
                    self.emitter.sink = discard if ordinal <= skip else self.sink
                    self.emitter.end(current, *last)
                if ordinal > skip and self._pending() >= soft:
                    self._commit(self._batch_position(batch, ordinal, complete=False))
                self.emitter.sink = discard if ordinal < skip else self.sink
                self.emitter.begin(ev.txid, position, ev.ts_ms)
                current = ev.txid
            elif ordinal > skip and self._pending() >= 10 * soft:
                self._commit(self._batch_position(batch, ordinal, complete=False))
            self.emitter.sink = discard if ordinal < skip else self.sink
            self.emitter.change(ev, position)
            ordinal += 1
            last = (position, ev.ts_ms)
        if current is not None:
            self.emitter.sink = discard if ordinal <= skip else self.sink
            self.emitter.end(current, *last)
        self.emitter.sink = self.sink
        return ordinal

    def _control(self, ev: Event, tick: int) -> None:
        """Apply a control event (also when replayed below the committed position: idempotent)."""
        started = time.monotonic()
        if ev.op == SET_VERSION:
            record = self.control.set_version(self.record, ev)
            if record is not None:
                log.info("switching to set version %d at tick %d", record["version"], tick)
                self._switch(record)
        else:
            changed = self.control.schema_change(self.record, ev, tick)
            if changed is not None:
                self._switch(*changed)
        log.info("control event %s at tick %d handled in %.1f ms (set version %d)", ev.op, tick,
                 (time.monotonic() - started) * 1000, self.set_version)

    def _batch_position(self, batch: Batch, ordinal: int, complete: bool) -> Position:
        """Position after the first ordinal events of batch (all of it when complete)."""
        return Position(batch.cur_tick_id, ordinal, complete, self.position.txid_snapshot)

    def _pending(self) -> int:
        """Messages produced since the last commit."""
        return self.sink.produced - self._committed_produced

    def _progress(self) -> None:
        now = time.monotonic()
        if now - self._last_progress < self.options.progress_interval:
            return
        self._last_progress = now
        lag_s, pending = self.source.lag()
        metrics.LAG_SECONDS.labels(self.set_name).set(lag_s)
        metrics.LAG_EVENTS.labels(self.set_name).set(pending)
        log.info("relayed %d changes in %d batches (%.0f changes/s); queue lag %.1fs, %d events",
                 self.changes, self.batches, self.changes / (now - self._started), lag_s, pending)
