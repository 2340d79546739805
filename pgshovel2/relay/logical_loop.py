"""The relay loop of the ``logical`` backend: slot stream -> Kafka transactions -> slot feedback.

Same exactly-once scheme as the trigger backend (:mod:`pgshovel2.relay.loop`,
whose :class:`~pgshovel2.relay.loop.Relay` this extends: same sink, emitter,
envelopes, codec and position records), with positions in LSNs:

- A position record is ``Position(tick=<commit LSN>, ordinal, complete)``
  (backend ``logical``): every transaction committing at or below that LSN
  is in Kafka (``complete``), or its first ``ordinal`` changes are (a huge
  transaction split over Kafka transactions).
- Header ``pgshovel.position``: ``<commit LSN, 16 hex digits>:<ordinal, 10
  digits>`` (sortable as text); snapshot rows ``<consistent point>:s<n>``.
- ``pgshovel.txid``: the transaction's xid made 64-bit with its epoch, as
  ``txid_current()`` returns it (computed by the plugin, sql/decoder).
- Several source transactions share one Kafka transaction: it is committed
  ``MAX_COMMIT_DELAY`` (20 ms) after its first complete source transaction,
  or earlier at ``max_transaction_messages``. The slot is confirmed (standby
  feedback, flush LSN = the last committed transaction's end) only after
  the Kafka commit; a restart streams from the confirmed point and skips
  what the position record covers.

First start: the relay creates the slot with an exported snapshot, copies
the set's tables in that snapshot (``op=r``) and commits the slot's
consistent point as its position, then streams: snapshot + stream = source.
A slot that is gone while Kafka holds a position is an error (no guessing).
"""

import logging
import threading
import time
from typing import Any

from pgshovel2 import failpoints
from pgshovel2.errors import RelayError
from pgshovel2.relay import metrics
from pgshovel2.relay.logical_source import Begin, Commit, Heartbeat, LogicalSource, lsn_text, missing_slot_message
from pgshovel2.relay.loop import Relay, _Discard, _StopRequestedError
from pgshovel2.relay.pgq_source import Event
from pgshovel2.relay.positions import Position, read_position

log = logging.getLogger(__name__)

BACKEND = "logical"
MAX_COMMIT_DELAY = 0.02  # s from a transaction's end to its Kafka commit, under load


def change_position(commit_lsn: int, ordinal: int) -> str:
    """``pgshovel.position`` of a change: commit LSN (hex, zero-padded) and ordinal in its transaction."""
    return f"{commit_lsn:016X}:{ordinal:010d}"


def snapshot_position(lsn: int, ordinal: int) -> str:
    """``pgshovel.position`` of a snapshot row: after everything before the consistent point lsn."""
    return f"{lsn:016X}:s{ordinal:010d}"


class LogicalRelay(Relay):
    """Relays one ``logical`` set until stop is set (errors as :class:`Relay`)."""

    source: LogicalSource

    def _source_name(self, record: dict[str, Any]) -> str:
        """Where the set's changes come from: its replication slot."""
        return record["slot"]

    def _open_source(self) -> LogicalSource:
        return LogicalSource(self.config.dsn, self.queue, self.tables)

    def run(self, stop: threading.Event) -> None:
        """Fence older relays, create the slot and snapshot if needed, then stream until stop."""
        try:
            self.sink.start()
            position = read_position(self.options.bootstrap, self.positions_topic, self.position_key.decode())
            if position is not None and position.backend != BACKEND:
                raise RelayError(f"the position record of set {self.set_name!r} is of the {position.backend} "
                                 "backend: the set's topics belong to another set; use another topic_prefix")
            self._switch(self._record_at(position))
            try:
                self.position = self._handoff(stop, position)
            except _StopRequestedError:
                log.info("stopped during the snapshot; nothing of it is visible, it restarts on the next start")
                return
            self.source.start()
            _Stream(self).run(stop)
        finally:
            self.source.close()
            self.sink.close()

    def _handoff(self, stop: threading.Event, position: Position | None) -> Position:
        mode = self.options.snapshot
        if mode == "force" or (position is None and mode == "auto"):
            self.source.drop_slot()  # nothing of it is in Kafka (or a re-bootstrap was asked for)
            lsn, exported = self.source.create_slot(export=True)
            return self._snapshot_at(stop, lsn, exported)
        if position is None:
            self.source.drop_slot()
            lsn, _ = self.source.create_slot(export=False)
            log.info("skipping the initial snapshot: relaying changes from the slot's consistent point %s",
                     lsn_text(lsn))
            position = self._commit(Position(lsn, 0, True, None, BACKEND))
            self.store.put_relay_record(self.set_name, "snapshot", {"slot": self.queue, "skipped": True,
                                                                    "lsn": lsn_text(lsn)})
            return position
        if not self.source.slot_exists():
            raise RelayError(missing_slot_message(self.queue))
        log.info("resuming slot %s after commit LSN %s (%s)", self.queue, lsn_text(position.tick),
                 "complete" if position.complete else f"first {position.ordinal} changes")
        return position

    def _snapshot_at(self, stop: threading.Event, lsn: int, exported: str) -> Position:
        log.info("taking the initial snapshot of %d table(s) at the slot's consistent point %s",
                 len(self.tables), lsn_text(lsn))
        _, rows, now_ms, seconds = self._emit_snapshot(stop, lambda o: snapshot_position(lsn, o), lsn,
                                                       exported=exported, encode_row="pgshovel2_decoder.encode_row")
        position = self._commit(Position(lsn, 0, True, None, BACKEND))
        self.store.put_relay_record(self.set_name, "snapshot", {
            "slot": self.queue, "lsn": lsn_text(lsn), "rows": rows, "taken_at_ms": now_ms})
        log.info("snapshot done: %d rows in %.1fs, handoff at LSN %s", rows, seconds, lsn_text(lsn))
        return position


class _Stream:
    """The streaming state of a :class:`LogicalRelay`: the open source transaction and
    what is produced but not committed in Kafka."""

    def __init__(self, relay: LogicalRelay):
        self.relay, self.source, self.emitter = relay, relay.source, relay.emitter
        self.soft = relay.options.max_transaction_messages
        self.txn: Begin | None = None
        self.covered = False  # the open transaction is wholly in Kafka already
        self.ordinal = self.skip = 0
        self.last_position = ""
        self.done: tuple[int, int] | None = None  # (commit LSN, end LSN) of the last complete txn not committed
        self.done_at = 0.0
        self.idle_since = time.monotonic()
        self.discard = _Discard()

    def run(self, stop: threading.Event) -> None:
        """Stream until stop is set (the open Kafka transaction is then left to be aborted)."""
        while not stop.is_set():
            record = self.source.read()
            if record is None:
                self._idle()
                continue
            if isinstance(record, Event):
                self._change(record)
            elif isinstance(record, Begin):
                self._begin(record)
            elif isinstance(record, Commit):
                self._end(record)
            else:
                self._heartbeat(record)

    def _idle(self) -> None:
        """Nothing buffered: commit what is complete once MAX_COMMIT_DELAY has passed since the
        first of it (so a steady stream of small transactions costs at most ~50 Kafka commits
        per second), heartbeat when idle long enough, wait for more."""
        relay = self.relay
        wait = min(relay.options.poll_interval * 25, 0.5)
        if self.done is not None and self.txn is None:
            left = MAX_COMMIT_DELAY - (time.monotonic() - self.done_at)
            if left <= 0:
                self._flush()
            else:
                wait = left
        now = time.monotonic()
        if self.txn is None and now - self.idle_since >= relay.options.heartbeat_interval:
            self.source.heartbeat()
            self.idle_since = now
        relay._check_leadership()
        self._progress()
        self.source.wait(wait)

    def _begin(self, begin: Begin) -> None:
        position = self.relay.position
        self.txn, self.ordinal = begin, 0
        self.covered = position.covers(begin.commit_lsn)
        if self.covered:
            return
        self.skip = position.skip(begin.commit_lsn)
        if self.skip:
            log.info("resuming transaction %d (commit LSN %s) after its first %d changes (already in Kafka)",
                     begin.txid, lsn_text(begin.commit_lsn), self.skip)
        self.last_position = change_position(begin.commit_lsn, 0)
        self.emitter.sink = self.discard if self.skip else self.relay.sink
        self.emitter.begin(begin.txid, self.last_position, begin.ts_ms, begin.ts_us, begin.last_lsn)

    def _change(self, ev: Event) -> None:
        txn = self.txn
        if self.covered:
            self.ordinal += 1
            return
        relay = self.relay
        if self.ordinal >= self.skip and self.ordinal and relay._pending() >= 10 * self.soft:
            self._commit(Position(txn.commit_lsn, self.ordinal, False, None, BACKEND))
        self.emitter.sink = self.discard if self.ordinal < self.skip else relay.sink
        self.last_position = change_position(txn.commit_lsn, self.ordinal)
        if ev.row is None and ev.op == "D":
            self._delete_without_row(ev)
        elif ev.before is not None and ev.before == ev.row and ev.table in self.source.subset_tags:
            pass  # no captured column changed (the trigger backend writes no event either)
        else:
            self.emitter.change(ev, self.last_position)
        self.ordinal += 1
        if self.ordinal > self.skip:
            relay.changes += 1
            relay._m_changes.inc()

    def _delete_without_row(self, ev: Event) -> None:
        route = self.emitter.routes[ev.table]
        if route.table.key:
            raise RelayError(f"a DELETE on {ev.table} came without its key (replica identity NOTHING?): "
                             f"set REPLICA IDENTITY on the table and re-create set {self.relay.set_name!r}")
        self.emitter.skipped_unkeyed_deletes += 1

    def _end(self, commit: Commit) -> None:
        txn, self.txn = self.txn, None
        self.idle_since = time.monotonic()
        if self.covered:
            self.covered = False
            if self.done is None:
                self.source.confirm(commit.end_lsn)  # in Kafka before the restart
            return
        self.emitter.sink = self.relay.sink
        self.emitter.end(txn.txid, self.last_position, txn.ts_ms)
        if self.done is None:
            self.done_at = time.monotonic()
        self.done = (commit.commit_lsn, commit.end_lsn)
        if self.relay._pending() >= self.soft or time.monotonic() - self.done_at >= MAX_COMMIT_DELAY:
            self._flush()

    def _heartbeat(self, beat: Heartbeat) -> None:
        """Everything before beat is sent: commit what is complete, then confirm the slot up to it."""
        if self.txn is not None:
            return
        if self.done is not None:
            self._flush()
        self.source.confirm(beat.lsn)

    def _flush(self) -> None:
        """Commit the complete transactions produced so far, then confirm the slot after them."""
        commit_lsn, end_lsn = self.done
        self._commit(Position(commit_lsn, 0, True, None, BACKEND))
        failpoints.hit("before_finish")
        self.source.confirm(end_lsn)
        self.done = None

    def _commit(self, position: Position) -> None:
        self.emitter.sink = self.relay.sink
        self.relay._commit(position)
        self.relay.batches += 1
        self.relay._m_batches.inc()

    def _progress(self) -> None:
        relay = self.relay
        now = time.monotonic()
        if now - relay._last_progress < relay.options.progress_interval:
            return
        relay._last_progress = now
        lag, retained = self.source.lag()
        metrics.SLOT_LAG_BYTES.labels(relay.set_name).set(lag)
        log.info("relayed %d changes in %d Kafka transactions (%.0f changes/s); slot %s lags %d bytes, "
                 "retains %d bytes of WAL", relay.changes, relay.batches, relay.changes / (now - relay._started),
                 relay.queue, lag, retained)
        if retained > relay.options.slot_lag_warn_bytes:
            log.warning("replication slot %s retains %d MiB of WAL (warning above %d MiB): the relay is behind "
                        "or was stopped; PostgreSQL keeps this WAL until the slot confirms it (cap it with "
                        "max_slot_wal_keep_size, at the price of losing the slot)", relay.queue,
                        retained >> 20, relay.options.slot_lag_warn_bytes >> 20)
