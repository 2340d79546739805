"""The relay loop's native-lane paths (:class:`LaneRelaying`, a base of
:class:`pgshovel2.relay.loop.Relay`): ChangeRuns and TxnRuns written by the emitter's native
lane where it can, item by item where the item path has work to do."""

from pgshovel2.relay.source import ChangeRun, Item, TxnRun
from pgshovel2.wire import change_header_at, position_prefix


class LaneRelaying:
    """The Relay methods for ChangeRun and TxnRun items. They share the relay's state (the open
    source transaction ``_txn``, ``_prefix``/``_prefix_unit``, ``changes``, ``_ready``, the
    commit clock) and fall back to its item path (``_change``, ``_item``) record by record."""

    def _run(self, run: ChangeRun) -> None:
        """Relay a ChangeRun through the emitter's native lane, but record by record (:meth:`_change`)
        where that path has work to do: a record the lane leaves, and all of the run in a unit the
        committed position reaches, during an online snapshot's chunk, or when the Kafka transaction
        could reach its hard size. A transaction's first change goes to the lane too (:meth:`_first_lane`)."""
        i, n = 0, len(run.records)
        while i < n:
            if self._itemwise(run.unit, run.ordinal + i, 3 * (n - i)):
                self._changes(run, i, n)
                return
            done = self._lane(run, i) if self._txn.begun else self._first_lane(run, i)
            if not done:
                self._changes(run, i, i + 1)
                done = 1
            i += done

    def _txn_run(self, run: TxnRun) -> None:
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
        restart; when the run's first event is not covered, none of the run is), an online snapshot's chunk, or a
        Kafka transaction that could reach its hard size. (A unit committed in part by this relay,
        a PgQ batch or a source transaction bigger than a Kafka transaction, goes on in the lane.)"""
        return (self.committed.covers(unit, ordinal) or (self.online is not None and self.online.chunk is not None)
                or self._pending() + messages >= self.hard)

    def _txns_done(self, run: TxnRun, start: int, stop: int) -> None:
        """The bookkeeping of the Commits of run.txns[start:stop], which the lane wrote."""
        last = run.txns[stop - 1]
        self.lag.read(run.txns[start].ts_ms)
        self.lag.read(last.ts_ms)
        self.changes += last.stop - run.txns[start].start
        self._at_unit(last.unit)
        self._ready = self._point(last.unit, last.ordinal + last.stop - last.start, run.complete)
        if run.complete:
            self._clock.complete_point()
        if self._pending() >= self.soft or (run.complete and self._clock.due(last.ts_ms)):
            self._commit_ready()

    def _items(self, items: list[Item]) -> None:
        for item in items:
            self._item(item)

    def _first_lane(self, run: ChangeRun, start: int) -> int:
        """:meth:`_lane` at the open transaction's first change, run.records[start]; when the lane
        takes it, the transaction's BEGIN record (what :meth:`_change` writes there) follows its
        messages in the same Kafka transaction."""
        txn, begin = self._txn, self._txn.begin
        self.emitter.open(begin.ts_us, begin.last_lsn)
        done = self._lane(run, start)
        if done:
            self.emitter.begin_record(begin.txid, change_header_at(self._prefix, run.ordinal + start), run.ts_ms)
            txn.begun = True
        return done

    def _lane(self, run: ChangeRun, start: int) -> int:
        """emitter.change_run of run.records[start:] with the bookkeeping of :meth:`_change`; returns
        how many records it relayed."""
        if run.unit != self._prefix_unit:
            self._prefix_unit, self._prefix = run.unit, position_prefix(self.source.backend, run.unit)
        self.emitter.replaying = False
        done = self.emitter.change_run(run, start, self._prefix)
        if done:
            self._txn.last_header = change_header_at(self._prefix, run.ordinal + start + done - 1)
            self._txn.last_covered = False
            self.changes += done
        return done

    def _changes(self, run: ChangeRun, start: int, stop: int) -> None:
        for item in run.expand(run, start, stop):
            self._change(item)
