"""The relay loop: PgQ batches -> messages -> Kafka -> pgq.finish_batch.

A batch is acknowledged only after every one of its messages is acknowledged
by Kafka (acks=all), so a crash at any point loses nothing; until the
exactly-once work lands, a crash may repeat the messages of one batch.
"""

import logging
import threading
import time
from dataclasses import dataclass

from pgshovel2 import names
from pgshovel2.capture.trigger import CONSUMER
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig
from pgshovel2.relay import setup, snapshot
from pgshovel2.relay.emitter import Emitter
from pgshovel2.relay.pgq_source import Batch, PgqSource
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelayOptions:
    """Relay settings. snapshot: 'auto' (first start only), 'force' or 'skip'.

    poll_interval / progress_interval: seconds.
    """

    bootstrap: str
    registry_url: str | None = None
    snapshot: str = "auto"
    poll_interval: float = 0.05
    progress_interval: float = 10.0


class _StopRequestedError(Exception):
    """Raised inside the snapshot when a stop was requested."""


def _position(tick: int, ordinal: int) -> str:
    """Sortable position of a message: ``<cur tick id>:<ordinal in batch>``, zero-padded."""
    return f"{tick:020d}:{ordinal:010d}"


class Relay:
    """Relays one set until stop is set. Raises RelayError/EncodeError when it cannot go on."""

    def __init__(self, store: ClusterStore, set_name: str, options: RelayOptions):
        self.store, self.set_name, self.options = store, set_name, options
        record, _ = store.get_set(set_name)
        self.set_version: int = record["version"]
        self.config = SetConfig.from_dict(record["config"])
        self.tables = tuple(Table.from_dict(t) for t in record["tables"])
        self.queue = record["queue"]
        self.sink = KafkaSink(options.bootstrap)
        registry = SchemaRegistry(options.registry_url) if options.registry_url else None
        created = self.sink.ensure_topics(setup.topics(set_name, self.config, self.tables),
                                          self.config.topics)
        for topic in created:
            log.info("created topic %s", topic)
        routes, txn_writer = setup.routes(set_name, self.config, self.tables, registry)
        prefix = self.config.topic_prefix or set_name
        self.emitter = Emitter(set_name, routes, names.transactions_topic(prefix), txn_writer, self.sink)
        self.source = PgqSource(self.config.dsn, self.queue, CONSUMER)
        self.changes = self.batches = 0
        self._started = time.monotonic()
        self._last_progress = self._started

    def run(self, stop: threading.Event) -> None:
        """Snapshot if needed, then relay batches until stop is set."""
        try:
            try:
                txid_snapshot = self._handoff(stop)
            except _StopRequestedError:
                log.info("stopped during the snapshot; it restarts on the next start")
                return
            while not stop.is_set():
                batch = self.source.next_batch()
                if batch is None:
                    self.source.tick()
                    stop.wait(self.options.poll_interval)
                else:
                    self._relay_batch(batch, txid_snapshot)
                self._progress()
        finally:
            self.source.close()
            self.sink.close()

    def _handoff(self, stop: threading.Event) -> str | None:
        record = self.store.get_relay_record(self.set_name, "snapshot")
        mode = self.options.snapshot
        if mode == "force" or (record is None and mode == "auto"):
            return self._snapshot(stop)
        if record is None:
            log.info("skipping the initial snapshot: relaying queued changes only")
            self.store.put_relay_record(self.set_name, "snapshot", {"txid_snapshot": None, "skipped": True})
            return None
        return record["txid_snapshot"]

    def _snapshot(self, stop: threading.Event) -> str:
        log.info("taking the initial snapshot of %d table(s)", len(self.tables))
        now_ms = int(time.time() * 1000)
        started = time.monotonic()
        rows = 0

        def emit(table: Table, row: list, ordinal: int) -> None:
            nonlocal rows
            if stop.is_set():
                raise _StopRequestedError()
            self.emitter.snapshot_row(table, row, _position(0, ordinal), now_ms)
            rows += 1

        def progress(table: Table, done: int, total: int) -> None:
            log.info("snapshot %s: %d/%d rows (%.0f rows/s)", table.qualified, done, total,
                     rows / max(time.monotonic() - started, 1e-6))

        txid_snapshot = snapshot.take(self.config.dsn, self.tables, emit, progress)
        self.sink.flush()
        self.store.put_relay_record(self.set_name, "snapshot", {
            "txid_snapshot": txid_snapshot, "rows": rows, "taken_at_ms": now_ms})
        log.info("snapshot done: %d rows in %.1fs, handoff at txid snapshot %s",
                 rows, time.monotonic() - started, txid_snapshot)
        return txid_snapshot

    def _relay_batch(self, batch: Batch, txid_snapshot: str | None) -> None:
        current, ordinal, last = None, 0, ("", 0)
        for ev in self.source.events(batch, txid_snapshot):
            position = _position(batch.cur_tick_id, ordinal)
            if ev.txid != current:
                if current is not None:
                    self.emitter.end(current, *last)
                self.emitter.begin(ev.txid, position, ev.ts_ms)
                current = ev.txid
            self.emitter.change(ev, position)
            ordinal += 1
            last = (position, ev.ts_ms)
        if current is not None:
            self.emitter.end(current, *last)
        self.sink.flush()
        self.source.finish(batch)
        self.changes += ordinal
        self.batches += 1
        log.debug("batch %d (ticks %d..%d): %d changes", batch.batch_id,
                  batch.prev_tick_id, batch.cur_tick_id, ordinal)

    def _progress(self) -> None:
        now = time.monotonic()
        if now - self._last_progress < self.options.progress_interval:
            return
        self._last_progress = now
        lag_s, pending = self.source.lag()
        log.info("relayed %d changes in %d batches (%.0f changes/s); queue lag %.1fs, %d events",
                 self.changes, self.batches, self.changes / (now - self._started), lag_s, pending)
