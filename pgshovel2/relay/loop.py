"""The relay loop: any source (pgshovel2.relay.source) -> Kafka transactions -> source.ack.

Exactly-once: the messages up to a point of the stream and a position record saying so
(pgshovel2.wire.Position) are committed in one Kafka transaction, and the source is
acknowledged only after that commit. A relay restarted after a crash fences its
predecessor (same transactional id), reads the committed position and skips what it
covers: a unit committed but not acknowledged is only acknowledged, a unit split over
several Kafka transactions resumes after its last committed event (the committed start is
replayed muted, so a transaction's END record still counts all of it).

A Kafka transaction ends at a complete point (the end of a unit) once the source's
commit_delay has passed since the first complete point it holds -- but while the relay works
through a backlog (the source keeps delivering without going idle, and the point's source
commit is older than BACKLOG_SECONDS, or busy_commit_delay if longer) only once
``busy_commit_delay`` has passed, so a backlog fills fewer, larger Kafka transactions while a
relay that keeps up commits as soon as before (it sleeps out commit_delay rather than
waking at each source transaction, then reads what came meanwhile into the same Kafka
transaction); at a transaction boundary once it holds
``max_transaction_messages``; and inside one huge source transaction at ten times that, so
Kafka transactions stay bounded.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pgshovel2 import failpoints
from pgshovel2.catalog import Table
from pgshovel2.errors import EncodeError, KeyLayoutError, RelayError, StopRequestedError
from pgshovel2.relay.commits import Commits, Cursor, OpenTxn
from pgshovel2.relay.control import ControlEvents
from pgshovel2.relay.ddl.drop_watch import DropWatch
from pgshovel2.relay.ddl.gate import DdlGate
from pgshovel2.relay.ddl.partition_watch import PartitionWatch
from pgshovel2.relay.ddl.relaying import ControlRelay
from pgshovel2.relay.election import Leadership
from pgshovel2.relay.emit.oversized import readable_key
from pgshovel2.relay.layout import Layout
from pgshovel2.relay.monitor.progress import LagClock, Progress
from pgshovel2.relay.options import RelayOptions
from pgshovel2.relay.runs import RunRelay
from pgshovel2.relay.skips import Skips
from pgshovel2.relay.snapshot.emission import Emission, emit_chunk
from pgshovel2.relay.snapshot.initial import emit_initial_snapshot
from pgshovel2.relay.snapshot.none import NoOnlineSnapshot
from pgshovel2.relay.snapshot.online import OnlineSnapshot
from pgshovel2.relay.source import Begin, Change, ChangeRun, Commit, Control, Idle, Item, Source, TxnRun
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.wire import Position, change_header_at

log = logging.getLogger(__name__)
NO_SKIPS = Skips()


class Relay:
    """Relays one set from source to sink until stop is set.

    layout: the set layout in effect (its emitter produces to sink); control: applies
    control events; read_position(): the committed position in Kafka (None: none yet);
    position_topic/position_key: where position records go; on_handoff(record): keeps
    the handoff record (ZooKeeper ``relay/snapshot``); skips: the changes an operator asked to
    leave out when they cannot be relayed (pgshovel2.ops.skip, relay/skips.py), with where the
    relay records those it left out and where it stopped. online: the set's online snapshots
    (hooked in between Kafka transactions, at changes, controls and commits), None for none.
    watch: gives new partitions of the set's partitioned tables their TRUNCATE triggers (checked
    with the progress), None for none. gate: where the relay waits for the operator's decision on
    a DDL it cannot follow compatibly (None: SchemaChangeError is raised); drops: the watch for
    tables dropped without an event (None: none).

    Raises UnavailableError when a service goes away (retrying is safe), FencedError when
    another relay took over, RelayError/EncodeError when it cannot go on without losing or
    garbling a change, SchemaChangeError at a DDL it cannot relay compatibly when it has no gate
    (with one it waits there for the operator's decision; StopRequestedError when stopped meanwhile).
    """

    def __init__(self, set_name: str, source: Source, sink: KafkaSink, layout: Layout, control: ControlEvents,
                 options: RelayOptions, read_position: Callable[[], Position | None], position_topic: str,
                 position_key: bytes, leadership: Leadership | None = None,
                 on_handoff: Callable[[dict], None] = lambda record: None,
                 skips: Skips = NO_SKIPS, online: OnlineSnapshot | None = None,
                 watch: PartitionWatch | None = None, gate: DdlGate | None = None,
                 drops: DropWatch | None = None):
        self.set_name, self.source, self.sink, self.layout = set_name, source, sink, layout
        self.emitter, self.control, self.options = layout.emitter, control, options
        self.read_position = read_position
        self.leadership, self.on_handoff = leadership, on_handoff
        self.skips, self.watch = skips, watch
        self.online: OnlineSnapshot | NoOnlineSnapshot = online if online is not None else NoOnlineSnapshot()
        self.drops = drops
        self.commits = Commits(set_name, sink, source.backend, source.commit_delay, options, position_topic,
                               position_key, self.emitter.tally)
        self.cursor = Cursor(source.backend)
        self.lag = LagClock()
        self.controls = ControlRelay(set_name, source, layout, control, self.cursor, self.commits, self._commit_at,
                                     self.online, gate, drops)
        self.runs = RunRelay(self.cursor, self.commits, self.emitter, self.lag, self._item, self._change,
                             self._in_chunk, self._commit_ready, lambda: self.layout.version)
        self.progress = Progress(set_name, source, options.progress_interval, options.slot_lag_warn_bytes, self.lag)
        self._handlers: dict[type, Callable] = {
            Change: self._change, ChangeRun: self.runs.change_run, TxnRun: self.runs.txn_run, Begin: self._begin,
            Commit: self._end,
            Control: self.controls.relay, Idle: self._idle}

    @property
    def changes(self) -> int:
        """Changes relayed to Kafka by this relay (committed or in the open Kafka transaction)."""
        return self.commits.changes

    @property
    def batches(self) -> int:
        """Kafka transactions this relay committed."""
        return self.commits.batches

    def run(self, stop: threading.Event) -> None:
        """Fence older relays, hand off (snapshot) if needed, then relay until stop is set."""
        try:
            self.sink.start()
            self.layout.create_topics()
            committed = self.read_position()
            if committed is not None and committed.backend != self.source.backend:
                raise RelayError(f"the position record of set {self.set_name!r} is of the {committed.backend} "
                                 "backend: the set's topics belong to another set; use another topic_prefix")
            mode = self.options.snapshot
            resumed = mode == "force" and self._snapshot_online(committed)  # checked source.resume already
            if resumed:
                mode = "auto"  # an online snapshot was requested: resume from committed
            force = mode == "force"
            self.layout.resume(committed.start_version() if committed is not None and not force else 0)
            self.source.switch(self.layout.record)
            try:
                self.commits.committed = self._handoff(stop, committed, mode, resumed)
            except StopRequestedError:
                log.info("stopped during the snapshot; nothing of it is visible, it restarts on the next start")
                return
            self.online.resume(self.commits.committed.snapshot)
            self._stream(stop)
        finally:
            if self.drops is not None:
                self.drops.close()
            self.online.close()
            if self.watch is not None:
                self.watch.close()
            self.source.close()
            self.sink.close()

    # -- the handoff ------------------------------------------------------------------------

    def _snapshot_online(self, committed: Position | None) -> bool:
        """--snapshot with a committed position the source can resume from: request an online
        snapshot of every table of the set (as ``pgshovel set snapshot``) and stream on; True
        then. False (the old path: a new handoff, every table re-sent in one Kafka transaction)
        when there is no position, the source cannot resume from it (a logical set whose slot
        was lost) or a table has no key (online snapshots need one)."""
        if committed is None or not self.online.enabled:
            return False
        try:
            self.source.resume(committed)
        except RelayError as exc:
            log.info("--snapshot: a new initial snapshot, the set cannot resume from its position (%s)", exc)
            return False
        request = self.online.request_all(self.layout.record.tables)
        if request is None:
            log.info("--snapshot: a new initial snapshot, the set has a table without a key")
            return False
        log.info("--snapshot: online snapshot %s of every table of the set requested; streaming on", request.id)
        return True

    def _handoff(self, stop: threading.Event, committed: Position | None, mode: str,
                 resumed: bool = False) -> Position:
        """The position to stream after: a new snapshot (mode force, or auto without a committed
        position), a new start without one (mode skip) or committed, after source.resume checked
        the source can go on from it (resumed: _snapshot_online did that check already)."""
        if mode == "force" or (committed is None and mode == "auto"):
            position, snap, record = self.source.handoff(export=True)
            log.info("taking the initial snapshot of %d table(s) at %s", len(self.layout.record.tables),
                     position.describe())
            try:
                rows, ts_ms, seconds = emit_initial_snapshot(
                    stop, snap, self.source.backend, position, self.layout.record.tables, self.emitter,
                    lambda exc, header, table, row: self._unencodable(
                        exc, header, {"table": table.qualified, "op": "r", "txid": 0,
                                      "key": self._snapshot_key(table, row)}))
            except BaseException:
                self.sink.abort()
                raise
            finally:
                snap.close()
            position = self._commit(position)
            self.on_handoff({**record, "rows": rows, "taken_at_ms": ts_ms})
            log.info("snapshot done: %d rows in %.1fs, handoff at %s", rows, seconds, position.describe())
            return position
        if committed is None:
            position, _, record = self.source.handoff(export=False)
            log.info("skipping the initial snapshot: relaying changes after %s", position.describe())
            self.on_handoff(record)
            return self._commit(position)
        if not resumed:
            self.source.resume(committed)
        log.info("resuming after %s (set version %d)", committed.describe(), committed.set_version)
        return committed

    # -- the stream -------------------------------------------------------------------------

    def _stream(self, stop: threading.Event) -> None:
        for item in self.source.items(self.commits.committed):
            self._item(item)
            if stop.is_set():
                if self.commits.ready is not None and self.cursor.txn is None:
                    self._commit_ready()
                return

    def _item(self, item: Item) -> None:
        self._handlers[type(item)](item)

    def _in_chunk(self) -> bool:
        """Whether an online snapshot's chunk is open (its window sees every change)."""
        return self.online.chunk is not None

    def _begin(self, item: Begin) -> None:
        self.cursor.at_unit(item.unit, self.layout.version)
        self.cursor.txn = OpenTxn(item)
        self.lag.read(item.ts_ms)

    def _change(self, item: Change) -> None:
        commits, unit = self.commits, item.unit
        committed = commits.committed
        past = unit > committed.unit  # the usual case, neither reached nor covered: skip both checks
        if not past and committed.reaches(unit, 0, True):
            return  # its whole unit is in Kafka (streamed again after a restart): nothing to rebuild
        if self.online.chunk is not None:
            self.online.touch(item)
        covered = not past and committed.covers(unit, item.ordinal)
        if not covered and item.ordinal and commits.pending() >= commits.hard:
            self._commit_at(commits.point(unit, item.ordinal, False))  # inside one huge transaction
        cursor, emitter = self.cursor, self.emitter
        txn = cursor.txn
        prefix = cursor.prefix if unit == cursor.prefix_unit else cursor.prefix_of(unit)
        header = change_header_at(prefix, item.ordinal)  # cursor.header, without a call per change
        emitter.replaying = covered
        if not txn.begun:
            begin = txn.begin
            emitter.begin(begin.txid, header, item.ts_ms, begin.ts_us, begin.last_lsn)
            txn.begun = True
        try:
            emitter.change(item, header)
        except KeyLayoutError as exc:
            self.controls.key_layout_stop(item, exc)
            self.emitter.change(item, header)  # in the table's new topic generation
        except EncodeError as exc:
            self._unencodable(exc, header, {"table": item.table, "op": item.op, "txid": item.txid,
                                            "key": self._key_of(item)})
        txn.last_header, txn.last_covered = header, covered
        if not covered:
            commits.changes += 1

    def _key_of(self, item: Change) -> str:
        """The readable key of a change's row (its old row for a DELETE), for errors and skips."""
        route = self.emitter.routes.get(item.table)
        row = item.row if item.row is not None else item.before
        return readable_key(route.table, row, route.encoder.controls) if route is not None and row is not None \
            else "(none)"

    def _snapshot_key(self, table: Table, row: Any) -> str:
        """The readable key of a snapshot row of table, with its column controls (oversized.readable_key)."""
        route = self.emitter.routes.get(table.qualified)
        return readable_key(table, row, route.encoder.controls if route is not None else None)

    def _unencodable(self, exc: EncodeError, header: str, what: dict) -> None:
        """The operator's choice for a change at header that cannot be relayed: stop, naming the
        position, the key and how to get past it (raises EncodeError, after recording where it
        stopped), or, when asked to (skips), leave it out and record it. Nothing of the change was
        produced (envelopes build every message first, the oversized guard checks them all)."""
        what = {**what, "error": str(exc)}
        if not self.skips.asked(header, what):
            self.skips.on_stop(header, what)
            raise EncodeError(f"{exc}; the change ({what['op']} of txid {what['txid']}, key {what.get('key')}) is at "
                              f"position {header}: the relay stops here and drops nothing. If it cannot be fixed, "
                              f"'pgshovel set skip {self.set_name} --position {header} --reason ...' lets the next "
                              "start leave out this one change (recorded in ZooKeeper)") from exc
        log.warning("leaving out the change at position %s as asked (pgshovel set skip): %s", header, exc)
        self.skips.on_skip(header, what)

    def _end(self, item: Commit) -> None:
        cursor, commits = self.cursor, self.commits
        txn, cursor.txn = cursor.txn, None
        cursor.at_unit(item.unit, self.layout.version)
        if txn is not None and txn.begun:
            self.emitter.replaying = txn.last_covered
            self.emitter.end(txn.begin.txid, txn.last_header, item.ts_ms)
        self.emitter.replaying = False
        point = commits.point(item.unit, item.ordinal, item.complete)
        if commits.committed.reaches(item.unit, item.ordinal, item.complete):
            if item.complete and commits.ready is None:
                self.source.ack(point)  # in Kafka before a restart: only the acknowledgement was missing
            return
        if self.online.chunk is not None:
            self._online_emit(self.online.at_commit(item), item.unit)
        commits.hold(point)
        if commits.due(item.complete, item.ts_ms):
            self._commit_ready()

    def _idle(self, item: Idle) -> None:
        wait, ready, txn, clock = item.wait, self.commits.ready, self.cursor.txn, self.commits.clock
        # Not while a source transaction is half produced: the commit would be at ready, before it
        if ready is not None and (txn is None or not txn.begun):
            left = clock.delay_left()
            if left <= 0 or not ready.complete:
                self._commit_ready()
            else:
                # Sleep, not source.wait: waking at every source transaction (a select, a read and
                # an Idle each) cost the relay more CPU than relaying it. What came meanwhile is
                # read next, into this Kafka transaction, which ends once the source has no more.
                time.sleep(left)
                clock.slept, wait = True, 0.0
        elif ready is not None and clock.slept:
            clock.drained = True  # the source has no more: the Kafka transaction ends with this one (due)
        elif ready is None:
            self.online.step(self.layout.record)
        if self.commits.ready is None and self.cursor.txn is None:
            self.lag.idle()
            self.controls.watch_drops()
        self._check_leadership()
        self._progress()
        self.source.wait(wait)

    # -- commits ----------------------------------------------------------------------------

    def _commit_ready(self) -> None:
        self._commit_at(self.commits.ready)

    def _commit_at(self, position: Position) -> None:
        """Commit the open Kafka transaction at position, then acknowledge the source up to the
        last complete point it holds."""
        ready = self.commits.ready
        self._commit(position)
        done = position if position.complete else (ready if ready is not None and ready.complete else None)
        self.commits.next_transaction()
        if done is not None:
            failpoints.hit("before_finish")
            self.source.ack(done)
            txn = self.cursor.txn
            self.lag.acknowledged(txn.begin.ts_ms if txn is not None else None)
        self.online.step(self.layout.record)
        self._progress()

    def _online_emit(self, emission: Emission | None, unit: int) -> None:
        """Produce an online snapshot chunk's rows at the snapshot positions of unit (emit_chunk)."""
        if emission is not None:
            emit_chunk(self.emitter, emission, self.source.backend, unit,
                       lambda exc, header, row: self._unencodable(
                           exc, header, {"table": emission.table.qualified, "op": "r", "txid": 0,
                                         "key": self._snapshot_key(emission.table, row)}))

    def _commit(self, position: Position) -> Position:
        """Commit the open Kafka transaction with position as its last record."""
        position = replace(position, set_version=self.layout.version, batch_version=self.cursor.unit_version,
                           snapshot=self.online.progress_of(position))
        return self.commits.commit(position, self._check_leadership)

    def _check_leadership(self) -> None:
        if self.leadership is not None:
            self.leadership.check()

    def _progress(self) -> None:
        self.progress.report(self.commits.changes, self.commits.batches)
        if self.watch is not None:
            self.watch.check(self.layout.record)
