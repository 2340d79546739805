"""The relay loop's control-event path (:class:`ControlRelay`, a collaborator of
:class:`pgshovel2.relay.loop.Relay`): set versions and DDL switched exactly at their event, the
transactions-topic record that marks a table's layout or topic changing or its end, a stop at a
change the rules cannot follow until the operator decides (:mod:`pgshovel2.relay.ddl.gate`),
and the watch for tables dropped where no event says so (:mod:`pgshovel2.relay.ddl.drop_watch`)."""

import logging
import time
from collections.abc import Callable

from pgshovel2.errors import KeyLayoutError, SchemaChangeError
from pgshovel2.relay.commits import Commits, Cursor
from pgshovel2.relay.control import ControlEvents, Switch
from pgshovel2.relay.ddl.drop_watch import DropWatch
from pgshovel2.relay.ddl.gate import DdlGate, stop_record
from pgshovel2.relay.ddl.schema_change import NEW_TOPIC
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.layout import Layout
from pgshovel2.relay.snapshot.none import NoOnlineSnapshot
from pgshovel2.relay.snapshot.online import OnlineSnapshot
from pgshovel2.relay.source import Change, Control, Source
from pgshovel2.wire import Position

log = logging.getLogger(__name__)


class ControlRelay:
    """Relays Control items and key values a kept key layout cannot hold, for the loop.

    It shares the loop's layout (the set layout in effect), control events, cursor (the open
    source transaction), commits and emitter; commit_at(position) is the loop's commit (and
    acknowledgement) at a point. gate: where it waits for the operator's decision on a DDL it
    cannot follow compatibly (None: SchemaChangeError is raised there); drops: the watch for tables
    dropped without an event; online: the set's online snapshots (NoOnlineSnapshot: none)."""

    def __init__(self, set_name: str, source: Source, layout: Layout, control: ControlEvents, cursor: Cursor,
                 commits: Commits, commit_at: Callable[[Position], None], online: OnlineSnapshot | NoOnlineSnapshot,
                 gate: DdlGate | None = None, drops: DropWatch | None = None):
        self.set_name, self.source, self.layout, self.control = set_name, source, layout, control
        self.cursor, self.commits, self._commit_at = cursor, commits, commit_at
        self.gate, self.drops, self.online = gate, drops, online

    @property
    def emitter(self) -> Emitter:
        return self.layout.emitter

    def relay(self, item: Control) -> None:
        """Apply a control event (also when replayed below the committed position: idempotent)."""
        self.cursor.at_unit(item.unit, self.layout.version)
        if self.online.control(item):
            return  # a watermark of an online snapshot
        started = time.monotonic()
        try:
            switch = self.control.apply(self.layout.record, item)
        except SchemaChangeError as exc:
            position = self._header(item.unit, item.ordinal)
            decision = self._stop_at(item.unit, item.ordinal, exc, stop_record(
                exc.table or item.table, exc.statement, exc.reason, exc.key_change, position, item.txid, item.unit,
                item.ordinal, str(exc)))
            switch = self.control.accept(self.layout.record, item, decision)
        if switch is not None:
            self._switch(switch, item.txid, item.unit, item.ordinal, item.ts_ms)
        log.info("control event %s handled in %.1f ms (set version %d)", item.op,
                 (time.monotonic() - started) * 1000, self.layout.version)

    def key_layout_stop(self, item: Change, exc: KeyLayoutError) -> None:
        """A key value of item's table does not fit the key layout the table kept: switch the table
        to its next topic generation right before item (a stored version of that, on a replay, else
        the operator's decision, waited for), so item and what follows go there."""
        why = (f"(no DDL: a value of key column {exc.column!r} does not fit the key's schema, kept since a DDL "
               f"widened the column)")
        record = self.layout.record
        switch = self.control.new_generation(record, exc.table, item.txid, item.unit, item.ordinal, why, None)
        if switch is None:
            table = record.table(exc.table)
            message = (f"set {self.set_name!r}: {exc} at position {self._header(item.unit, item.ordinal)} (txid "
                       f"{item.txid}). The relay stopped at this change: every change before it is in Kafka. The "
                       f"table can only go on in a new topic with a new key schema: 'pgshovel set accept-ddl "
                       f"{self.set_name} {table.schema}.{table.name} --new-topic' continues it on topic generation "
                       f"{table.generation + 1} (its topic with '.g{table.generation + 1}'), which an online snapshot "
                       "of the table fills (docs/runbooks.rst, 'Relay stopped on DDL')")
            reason = f"a value of key column {exc.column!r} does not fit the key's kept schema"
            decision = self._stop_at(item.unit, item.ordinal, exc, stop_record(
                exc.table, why, reason, True, self._header(item.unit, item.ordinal), item.txid, item.unit,
                item.ordinal, message, kind="key"))
            switch = self.control.new_generation(record, exc.table, item.txid, item.unit, item.ordinal, why,
                                                 decision)
        self._switch(switch, item.txid, item.unit, item.ordinal, item.ts_ms)

    def _stop_at(self, unit: int, ordinal: int, exc: Exception, stop: dict) -> dict:
        """Commit everything before the change at (unit, ordinal), then the operator's decision on it
        (waited for); without a gate (tests) exc is raised there."""
        if not self.commits.committed.covers(unit, ordinal):
            self._commit_at(self.commits.point(unit, ordinal, False))
        if self.gate is None:
            raise exc
        decision = self.gate.decide(stop)
        if stop["kind"] == "key" and decision.get("mode") != NEW_TOPIC:
            raise exc  # matches() lets only a new topic through for a key change
        return decision

    def _switch(self, switch: Switch, txid: int, unit: int, ordinal: int, ts_ms: int) -> None:
        """Relay in switch's set version from the event at (unit, ordinal) on, its mark written there
        (inside the event's source transaction, which gets its BEGIN record here when it has none
        yet) and, for a new topic generation, an online snapshot of the table requested."""
        header = self._header(unit, ordinal)
        log.info("switching to set version %d at %s", switch.record.version, header)
        covered = self.commits.committed.covers(unit, ordinal)
        if switch.dropped is not None:
            self.layout.drop(switch.record, switch.dropped)
        else:
            self.layout.use(switch.record, switch.route)
        self.source.switch(self.layout.record)
        if self.drops is not None and switch.dropped is not None:
            self.drops.ended(switch.dropped)
        if switch.mark is not None:
            self._mark(switch.mark, txid, header, ts_ms, covered)
        if switch.snapshot is not None and not covered and self.online.enabled:
            request = self.online.request_more(switch.snapshot)
            topic = switch.mark.get("new_topic") if switch.mark is not None else None
            log.info("online snapshot %s of %s requested: %s", request, switch.snapshot.qualified,
                     f"it fills the table's new topic {topic}" if topic else "the DDL rewrote values of the table")

    def _mark(self, mark: dict, txid: int, header: str, ts_ms: int, covered: bool) -> None:
        """Write mark at header in the open source transaction (its BEGIN first, if not written yet)."""
        txn, emitter = self.cursor.txn, self.emitter
        emitter.replaying = covered
        if txn is not None and not txn.begun:
            begin = txn.begin
            emitter.begin(begin.txid, header, ts_ms, begin.ts_us, begin.last_lsn)
            txn.begun = True
        emitter.ddl_mark(mark, txid, header, ts_ms)
        if txn is not None:
            txn.last_header, txn.last_covered = header, covered
        emitter.replaying = False

    def _header(self, unit: int, ordinal: int) -> str:
        return self.cursor.header(unit, ordinal)

    def watch_drops(self) -> None:
        """Between transactions: let the drop watch check the tables (when it is due)."""
        if self.drops is not None:
            self.drops.step(self.layout.record)
