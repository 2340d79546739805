"""The relay loop's native-lane path (:class:`RunRelay`): ChangeRuns and TxnRuns written by the
emitter's native lane where it can, item by item through the loop's item path where that path has
work to do."""

from collections.abc import Callable

from pgshovel2.relay.commits import Commits, Cursor
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.monitor.progress import LagClock
from pgshovel2.relay.source import Change, ChangeRun, Item, TxnRun
from pgshovel2.wire import change_header_at


class RunRelay:
    """Relays ChangeRun and TxnRun items for the loop (:class:`pgshovel2.relay.loop.Relay`).

    It shares the loop's cursor (the open source transaction, the unit, its position prefix), its
    commits and lag clock, and its emitter; item(item) and change(change) are the loop's item path,
    which it falls back to record by record; in_chunk() says whether an online snapshot's chunk is
    open (its changes must be seen one by one); commit_ready() ends the open Kafka transaction at
    its ready point; version() is the set version in effect (where a new unit starts)."""

    def __init__(self, cursor: Cursor, commits: Commits, emitter: Emitter, lag: LagClock,
                 item: Callable[[Item], None], change: Callable[[Change], None], in_chunk: Callable[[], bool],
                 commit_ready: Callable[[], None], version: Callable[[], int]):
        self.cursor, self.commits, self.emitter, self.lag = cursor, commits, emitter, lag
        self._item, self._change, self._in_chunk = item, change, in_chunk
        self._commit_ready, self._version = commit_ready, version

    def change_run(self, run: ChangeRun) -> None:
        """Relay a ChangeRun through the emitter's native lane, but record by record (the item path)
        where that path has work to do: a record the lane leaves, and all of the run in a unit the
        committed position reaches, during an online snapshot's chunk, or when the Kafka transaction
        could reach its hard size. A transaction's first change goes to the lane too (:meth:`_first_lane`)."""
        i, n = 0, len(run.records)
        while i < n:
            if self._itemwise(run.unit, run.ordinal + i, 3 * (n - i)):
                self._changes(run, i, n)
                return
            done = self._lane(run, i) if self.cursor.txn.begun else self._first_lane(run, i)
            if not done:
                self._changes(run, i, i + 1)
                done = 1
            i += done

    def txn_run(self, run: TxnRun) -> None:
        """Relay a TxnRun's whole transactions through the emitter's native lane, and each one it
        gives back as the items run.expand gives; the rest of the run so (checked before each lane
        call) in a unit the committed position reaches, during an online snapshot's chunk, or when
        the Kafka transaction could reach its hard size. The Kafka transaction may end after each
        lane call, as at the Commits of its transactions."""
        txns, i = run.txns, 0
        while i < len(txns):
            if self._itemwise(txns[i].unit, txns[i].ordinal, 5 * (txns[-1].stop - txns[i].start)):
                self._items(run.expand(run, i, len(txns)))
                return
            done = self.emitter.txn_run(run, i)
            if done:
                self._txns_done(run, i, i + done)
                i += done
            if i < len(txns):
                self._items(run.expand(run, i, i + 1))
                i += 1

    def _itemwise(self, unit: int, ordinal: int, messages: int) -> bool:
        """True where the item path has work to do for the rest of a run from (unit, ordinal), which
        makes at most messages more: an event the committed position covers (replayed after a
        restart; when the run's first event is not covered, none of the run is), an online snapshot's
        chunk, or a Kafka transaction that could reach its hard size. (A unit committed in part by
        this relay, a PgQ batch or a source transaction bigger than a Kafka transaction, goes on in
        the lane.)"""
        commits = self.commits
        return (commits.committed.covers(unit, ordinal) or self._in_chunk()
                or commits.pending() + messages >= commits.hard)

    def _txns_done(self, run: TxnRun, start: int, stop: int) -> None:
        """The bookkeeping of the Commits of run.txns[start:stop], which the lane wrote."""
        last, commits = run.txns[stop - 1], self.commits
        self.lag.read(run.txns[start].ts_ms)
        self.lag.read(last.ts_ms)
        commits.changes += last.stop - run.txns[start].start
        self.cursor.at_unit(last.unit, self._version())
        commits.hold(commits.point(last.unit, last.ordinal + last.stop - last.start, run.complete))
        if commits.due(run.complete, last.ts_ms):
            self._commit_ready()

    def _items(self, items: list[Item]) -> None:
        for item in items:
            self._item(item)

    def _first_lane(self, run: ChangeRun, start: int) -> int:
        """:meth:`_lane` at the open transaction's first change, run.records[start]; when the lane
        takes it, the transaction's BEGIN record (what the item path writes there) follows its
        messages in the same Kafka transaction."""
        txn = self.cursor.txn
        begin = txn.begin
        self.emitter.open(begin.ts_us, begin.last_lsn)
        done = self._lane(run, start)
        if done:
            self.emitter.begin_record(begin.txid, self.cursor.header(run.unit, run.ordinal + start), run.ts_ms)
            txn.begun = True
        return done

    def _lane(self, run: ChangeRun, start: int) -> int:
        """emitter.change_run of run.records[start:] with the item path's bookkeeping; returns how
        many records it relayed."""
        prefix = self.cursor.prefix_of(run.unit)
        self.emitter.replaying = False
        done = self.emitter.change_run(run, start, prefix)
        if done:
            txn = self.cursor.txn
            txn.last_header = change_header_at(prefix, run.ordinal + start + done - 1)
            txn.last_covered = False
            self.commits.changes += done
        return done

    def _changes(self, run: ChangeRun, start: int, stop: int) -> None:
        for item in run.expand(run, start, stop):
            self._change(item)
