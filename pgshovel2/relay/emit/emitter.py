"""Frames a set's data messages into transactions and produces them.

The table's envelope (:mod:`pgshovel2.relay.emit.envelopes`) turns each change into
data messages; the emitter adds the ``pgshovel.*`` headers, produces them and
counts them. Every source transaction is framed by BEGIN and END records on
the transactions topic; END carries per-topic counts of every data message
written for the transaction (tombstones included). TRUNCATE is a record on
the transactions topic in every envelope. Snapshot rows are not framed.

While :attr:`Emitter.replaying` is set, messages are built and counted but not produced:
the relay replays the already-committed start of a unit after a restart that way, so the
END record of a transaction split over two Kafka transactions still counts all of it.
"""

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from pgshovel2 import wire
from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import encode_record, txn_record_avro, txn_record_json
from pgshovel2.config import OversizedConfig
from pgshovel2.errors import EncodeError, RelayError
from pgshovel2.relay.emit.envelopes import SNAPSHOT_TRUE, Context, Envelope, Message, TxnOrder
from pgshovel2.relay.emit.lane import NAMES, OPS, TableLanes, table_label
from pgshovel2.relay.emit.oversized import Guard, Headers
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.emit.tally import TableTally
from pgshovel2.relay.source import Change, ChangeRun, TxnRun
from pgshovel2.sinks.kafka import KafkaSink


class Emitter:
    """Produces a set's messages to sink. routes: table tag -> TableRoute."""

    def __init__(self, set_name: str, routes: dict[str, TableRoute], txn_topic: str,
                 txn_writer: AvroWriter | None, sink: KafkaSink):
        self.set_name, self.routes, self.sink = set_name, routes, sink
        self.txn_topic, self._txn_writer = txn_topic, txn_writer
        self._counts: Counter[str] = Counter()
        self.tally = TableTally()  # per-table metrics, published at each Kafka commit
        self._order = TxnOrder()
        self._txn_ts_us: int | None = None  # the open source transaction's commit time (logical)
        self._txn_last_lsn: int | None = None  # LSN completely processed before it (logical)
        self.version = 0  # the set version the routes were built from: header pgshovel.version
        self.replaying = False  # build and count messages, produce none
        self._fixed_for: tuple | None = None  # (txid, ts_ms, version) of _fixed
        self._fixed: tuple = ()  # the headers every message of that transaction shares
        self._lanes: TableLanes | None = None  # the native lane of routes, for ChangeRuns
        self._shared_for, self._shared = -1, ()  # the (set, version) headers of version _shared_for
        self.guard: Guard | None = None  # the oversized policy (use_policy); None: nothing checked
        self.use_policy(OversizedConfig(), "")

    def use_policy(self, config: OversizedConfig, dead_letter: str) -> None:
        """Check every message against its topic's limit and apply config (set config ``oversized``;
        dead_letter: the set's dead-letter topic), from the next change on. Without a sink that
        knows limits (KafkaSink.message_limit) nothing is checked."""
        limit = getattr(self.sink, "message_limit", None)
        self.guard = Guard(self.set_name, config, limit, self.sink.produce, dead_letter) if limit else None
        self._lanes = None

    def switch(self, routes: dict[str, TableRoute], version: int, txn_writer: AvroWriter | None) -> None:
        """Use routes (table tag -> TableRoute) of set version from the next change on."""
        self.routes, self.version, self._txn_writer = routes, version, txn_writer

    def switch_table(self, route: TableRoute, version: int) -> None:
        """Use route for its table, and set version for every message, from the next change on."""
        self.routes = {**self.routes, route.table.qualified: route}
        self.version = version

    def _headers(self, op: str, txid: int, position: str, ts_ms: int) -> list[tuple[str, str]]:
        """A data message's headers, in the order op, txid, position, ts_ms, set, version (the
        four but op and position are built once per transaction: this runs per message)."""
        if self._fixed_for != (txid, ts_ms, self.version):
            self._fix(txid, ts_ms)
        txid_h, ts_h, set_h, version_h = self._fixed
        return [(wire.OP, op), txid_h, (wire.POSITION, position), ts_h, set_h, version_h]

    def _fix(self, txid: int, ts_ms: int) -> None:
        self._fixed_for = (txid, ts_ms, self.version)
        self._fixed = ((wire.TXID, str(txid)), (wire.TS_MS, str(ts_ms)), *self._shared_headers())

    def change_run(self, run: ChangeRun, start: int, prefix: str) -> int:
        """Produce the messages of run.records[start:] from the first on as far as the native lane
        takes them (:mod:`pgshovel2.relay.emit.lane`), what :meth:`change` would produce for each (and
        the debezium envelope's events numbered in the transaction's order as it would);
        returns how many records that is (0: none, run.records[start] is for :meth:`change`).
        prefix: the run's unit's wire.position_prefix."""
        lanes = self._lanes_for(run.tags)
        if lanes.lane is None or self.replaying:
            return 0
        if self._fixed_for != (run.txid, run.ts_ms, self.version):
            self._fix(run.txid, run.ts_ms)
        txn = None
        if lanes.debezium:
            ts_us = self._txn_ts_us if self._txn_ts_us is not None else run.ts_ms * 1000
            txn = (run.txid, run.ts_ms, ts_us, self._txn_last_lsn, self._order.total,
                   [self._order.at(c) if c is not None else 0 for c in lanes.collections])
        _, done, counts, events, tally = self._lane_call(
            lambda producer, wait: lanes.lane.encode(run.records, start, prefix, run.ordinal + start, OPS,
                                                     self._fixed, wire.POSITION, txn, producer, wait))
        if done:
            self.tally.add_lane(lanes.labels, tally)
            for topic, n in zip(lanes.topics, counts, strict=True):
                if n:
                    self._counts[topic] += n
            for collection, n in zip(lanes.collections, events, strict=True):
                if n:
                    self._order.advance(collection, n)
        return done

    def txn_run(self, run: TxnRun, first: int) -> int:
        """Produce the whole transactions of run.txns[first:] (BEGIN record, data messages, END
        record each) as far as the native lane takes every change of a transaction
        (Lane.encode_txns); returns how many transactions that is (run.txns[first + done], if any,
        is for the item path; 0 for all of them when there is no lane)."""
        lanes = self._lanes_for(run.tags)
        if lanes.lane is None or self.replaying:
            return 0
        avro = self._txn_writer.header if self._txn_writer is not None else None
        shared = self._shared_headers()
        _, done, tally = self._lane_call(
            lambda producer, wait: lanes.lane.encode_txns(run.records, run.txns, first, OPS, NAMES, shared,
                                                          self.txn_topic, avro, producer, wait))
        if done:
            self.tally.add_lane(lanes.labels, tally)
        return done

    def _lane_call(self, encode: Callable[[Any, Any], tuple]) -> tuple:
        """encode(producer, wait), a Lane call: into the sink's native producer when it has one
        (KafkaSink.produce_natively: the lane produces the messages itself), else
        encode(None, None), whose messages (the result's first item) go to produce_many."""
        natively = getattr(self.sink, "produce_natively", None)
        result = natively(encode) if natively is not None else None
        if result is None:
            result = encode(None, None)
            if result[0]:
                self.sink.produce_many(result[0])
        return result

    def _lanes_for(self, tags: list[str] | None) -> TableLanes:
        """The native lanes of the routes in effect for a run of tags (ChangeRun.tags), built anew
        when the routes or tags changed."""
        lanes = self._lanes
        if lanes is None or not lanes.of(self.routes, tags):
            lanes = self._lanes = TableLanes(self.routes, tags, self.guard.lane_limit if self.guard else None)
        return lanes

    def _shared_headers(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The (set, version) headers every message of the set version in effect has."""
        if self._shared_for != self.version:
            self._shared = ((wire.SET, self.set_name), (wire.VERSION, str(self.version)))
            self._shared_for = self.version
        return self._shared

    def _send(self, route: TableRoute, msg: Message, txid: int, position: str, ts_ms: int,
              unchanged: str | None = None, extra: Headers | None = None) -> None:
        if self.replaying:
            return
        key, value, op = msg
        headers = self._message_headers(op, txid, position, ts_ms, unchanged, value is not None)
        if extra:
            headers += extra
        self.sink.produce(route.topic, key, value, headers)

    def _message_headers(self, op: str, txid: int, position: str, ts_ms: int, unchanged: str | None,
                         has_value: bool) -> Headers:
        headers = self._headers(op, txid, position, ts_ms)
        if unchanged is not None and has_value and op in ("c", "u"):
            headers.append((wire.UNCHANGED, unchanged))
        return headers

    def _placed(self, route: TableRoute, msgs: list[Message], txid: int, position: str, ts_ms: int,
                unchanged: str | None, redo: Callable[[Any, Any], list[Message]], row: Any, before: Any
                ) -> list[tuple[Message, Headers]]:
        """msgs with the extra headers each needs: as they are when every one fits its topic (by
        size alone, the usual case), else as the oversized policy places them (Guard.handle,
        which raises OversizedError when it places none)."""
        guard = self.guard
        if guard is not None:
            quick, more = guard.quick(route.topic), len(unchanged) if unchanged else 0
            if any(len(m.key or b"") + len(m.value or b"") + more > quick for m in msgs):
                def headers(op: str) -> Headers:
                    return self._message_headers(op, txid, position, ts_ms, unchanged, True)

                if guard.over(route.topic, msgs, headers):
                    return guard.handle(route.table, route.topic, msgs, headers, redo, row, before, self.replaying,
                                        route.encoder.controls)
        return [(m, []) for m in msgs]

    def snapshot_row(self, table: Table, row: list, position: str, ts_ms: int, snapshot: str = SNAPSHOT_TRUE,
                     lsn: int | None = None) -> None:
        """Emit one snapshot row as op r (txid 0: no source transaction; not counted).

        snapshot: the row's Debezium snapshot marker (envelopes.SnapshotMarks); lsn: the
        LSN the snapshot was taken at (logical backend: the slot's consistent point), or None.
        """
        route = self.routes[table.qualified]
        ctx = Context(0, position, ts_ms, snapshot, lsn=lsn)
        msgs = route.envelope.read(row, ctx)
        for msg, extra in self._placed(route, msgs, 0, position, ts_ms, None,
                                       lambda new, _: route.envelope.read(new, ctx), row, None):
            self._send(route, msg, 0, position, ts_ms, None, extra)

    def begin(self, txid: int, position: str, ts_ms: int, ts_us: int | None = None,
              last_lsn: int | None = None) -> None:
        """Start a source transaction (BEGIN record). Logical backend only: ts_us, the commit
        time in µs; last_lsn, the LSN completely processed before it (logical_source.Begin)."""
        self.open(ts_us, last_lsn)
        self.begin_record(txid, position, ts_ms)

    def open(self, ts_us: int | None = None, last_lsn: int | None = None) -> None:
        """:meth:`begin` without its BEGIN record (:meth:`begin_record` writes it, also after the
        transaction's first messages)."""
        self._counts.clear()
        if self._order.total:  # a fresh one otherwise (most transactions number nothing: row envelope)
            self._order = TxnOrder()
        self._txn_ts_us, self._txn_last_lsn = ts_us, last_lsn

    def begin_record(self, txid: int, position: str, ts_ms: int) -> None:
        """The BEGIN record of the source transaction :meth:`open` started; position: its first change's."""
        self._txn_record("BEGIN", txid, position, ts_ms, None)

    def end(self, txid: int, position: str, ts_ms: int) -> None:
        """End a source transaction (END record with per-topic counts)."""
        self._txn_record("END", txid, position, ts_ms, sorted(self._counts.items()))

    def _txn_record(self, kind: str, txid: int, position: str, ts_ms: int, counts: list[tuple[str, int]] | None
                    ) -> None:
        """A BEGIN or END record (counts: [(data topic, messages)] sorted, None for BEGIN)."""
        if self.replaying:
            return
        if self._txn_writer is None:
            self._produce_record(txn_record_json(kind, txid, position, ts_ms, counts))
        else:
            self._produce_record(txn_record_avro(self._txn_writer.header, kind, txid, position, ts_ms, counts))

    def snapshot_mark(self, kind: str, topic: str, position: str, ts_ms: int, rows: int | None = None) -> None:
        """A table's online snapshot starts (kind SNAPSHOT_BEGIN) or is complete (SNAPSHOT_END, rows: the
        op r rows it emitted) on the transactions topic; table: the table's data topic, txid 0."""
        self._record({"type": kind, "txid": 0, "position": position, "ts_ms": ts_ms, "event_count": rows,
                      "data_collections": None, "table": topic})

    def ddl_mark(self, mark: dict, txid: int, position: str, ts_ms: int) -> None:
        """A table's layout or topic changing at a DDL, on the transactions topic at position (the
        event's; inside its source transaction): mark ``{type, table, new_topic}`` (type
        SCHEMA_CHANGED, TOPIC_CHANGED or TABLE_DROPPED, table the table's topic until here;
        TOPIC_CHANGED carries the topic it goes on in as data_collections' one entry, with
        event_count 0). Not counted in the END record."""
        collections = None if mark.get("new_topic") is None else [{"data_collection": mark["new_topic"],
                                                                    "event_count": 0}]
        self._record({"type": mark["type"], "txid": txid, "position": position, "ts_ms": ts_ms, "event_count": None,
                      "data_collections": collections, "table": mark["table"]})

    def drop_table(self, tag: str, version: int) -> None:
        """Stop routing table tag (dropped) and use set version from the next message on."""
        self.routes = {t: r for t, r in self.routes.items() if t != tag}
        self.version = version

    def _record(self, datum: dict) -> None:
        if not self.replaying:
            self._produce_record(encode_record(datum, self._txn_writer))

    def _produce_record(self, value: bytes) -> None:
        """Produce an encoded transactions-topic record."""
        self.sink.produce(self.txn_topic, None, value, list(self._shared_headers()))

    def change(self, ev: Change, position: str) -> None:
        """Emit the messages of one captured change (between begin and end of its txid).

        Raises RelayError for a table not in the set, or a keyed table's DELETE without its
        key (replica identity NOTHING); EncodeError (:func:`_unkeyed_without_old_row`: the loop
        stops there, naming the position and ``set skip``) for an unkeyed table's DELETE or
        UPDATE without its old row, which no consumer could apply.
        """
        route = self.routes.get(ev.table)
        if route is None:
            raise RelayError(f"event for table {ev.table} which is not in set {self.set_name!r}; "
                             "the set's capture and its ZooKeeper config disagree")
        if not route.table.key and (ev.op == "D" and ev.row is None or ev.op == "U" and ev.before is None):
            raise _unkeyed_without_old_row(self.set_name, ev)
        if ev.row is None and ev.op == "D":
            raise RelayError(f"a DELETE on {ev.table} came without its key (replica identity NOTHING?): "
                             f"set REPLICA IDENTITY on the table and re-create set {self.set_name!r}")
        envelope = route.envelope
        ctx = Context(ev.txid, position, ev.ts_ms, order=self._order, lsn=ev.lsn, last_lsn=self._txn_last_lsn,
                      ts_us=self._txn_ts_us) if getattr(envelope, "uses_context", True) else None
        if ev.op == "T":
            self._record({"type": "TRUNCATE", "txid": ev.txid, "position": position,
                          "ts_ms": ev.ts_ms, "event_count": None, "data_collections": None,
                          "table": route.topic})
            if getattr(envelope, "truncate_events", False):  # Debezium's op t event, alongside the record
                self._send(route, envelope.truncate(ctx), ev.txid, position, ev.ts_ms)
                self._counts[route.topic] += 1
            return
        unchanged = _unchanged_header(route.table, ev) if ev.unchanged else None
        row = envelope.fill_unchanged(ev.row, ev.unchanged) if ev.unchanged and hasattr(envelope, "fill_unchanged") \
            else ev.row  # Debezium's placeholder (pgshovel2.relay.emit.unavailable); the header names them still
        msgs = envelope.change(ev.op, row, ev.before, ctx)
        for msg, extra in self._placed(route, msgs, ev.txid, position, ev.ts_ms, unchanged,
                                       _redo(envelope, ev.op, ctx, msgs), row, ev.before):
            self._send(route, msg, ev.txid, position, ev.ts_ms, unchanged, extra)
        if msgs:
            self._counts[route.topic] += len(msgs)
            if not self.replaying:
                self.tally.add(table_label(route), ev.op, sum(len(m[0] or b"") + len(m[1] or b"") for m in msgs))


def _unkeyed_without_old_row(set_name: str, ev: Change) -> EncodeError:
    """The error for an unkeyed table's DELETE (UPDATE) that came without its (old) row: a consumer
    could not tell which of the table's rows it removed. Logical backend (ev.lsn set): written while
    the table's replica identity was not FULL (sets created before FULL was required); trigger
    backend: an UPDATE captured by a trigger installed before unkeyed tables' old rows were."""
    what = "DELETE came without its row" if ev.op == "D" else "UPDATE came without its old row"
    if ev.lsn is not None:
        fix = (f"its replica identity was not FULL when it was written: run ALTER TABLE {ev.table} "
               "REPLICA IDENTITY FULL so that later changes carry it")
    else:
        fix = (f"its capture trigger was installed by an older pgshovel2: run 'pgshovel set upgrade {set_name} "
               "CONFIG' so that later changes carry it")
    return EncodeError(f"set {set_name!r}: table {ev.table} has no key (allow_unkeyed) and this {what}, so no "
                       f"consumer could tell which row it changed: {fix} (skipping this one change leaves every "
                       "consumer's copy of the table different from the source by it)")


def _redo(envelope: Envelope, op: str, ctx: Context | None, first: list[Message]
          ) -> Callable[[Any, Any], list[Message]]:
    """envelope.change(op, row, before, ctx) again for other rows (oversized truncate), the event
    numbering of the messages it made last (first, at the start) taken back before."""
    last = [first]

    def redo(row: Any, before: Any) -> list[Message]:
        collection = getattr(envelope, "collection", None)
        if ctx is not None and ctx.order is not None and collection is not None:
            ctx.order.advance(collection, -sum(m.value is not None for m in last[0]))
        last[0] = envelope.change(op, row, before, ctx)
        return last[0]

    return redo


def _unchanged_header(table: Table, ev: Change) -> str:
    """The ``pgshovel.unchanged`` header of an UPDATE whose ev.unchanged values were not logged:
    a JSON array of the column names. Raises RelayError for a key column (PostgreSQL logs the
    replica identity's out-of-line values in the old key, so it never happens; a message without
    its key value would be wrong)."""
    cols = [table.columns[i].name for i in ev.unchanged]
    keys = [c for c in cols if c in table.key]
    if keys or ev.op != "U":
        raise RelayError(f"table {table.qualified}: the WAL holds no value of column(s) {', '.join(keys or cols)} "
                         f"of a change at position {ev.unit}:{ev.ordinal} ({ev.op})")
    return json.dumps(cols, ensure_ascii=False, separators=(",", ":"))
