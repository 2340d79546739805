"""Frames a set's data messages into transactions and produces them.

The table's envelope (:mod:`pgshovel2.relay.envelopes`) turns each change into
data messages; the emitter adds the ``pgshovel.*`` headers, produces them and
counts them. Every source transaction is framed by BEGIN and END records on
the transactions topic; END carries per-topic counts of every data message
written for the transaction (tombstones included). TRUNCATE is a record on
the transactions topic in every envelope. Snapshot rows are not framed.
"""

from collections import Counter
from dataclasses import dataclass, field

from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder, encode_record
from pgshovel2.errors import EncodeError, RelayError
from pgshovel2.relay.envelopes import SNAPSHOT_LAST, SNAPSHOT_TRUE, Context, Envelope, Message, RowEnvelope, TxnOrder
from pgshovel2.relay.pgq_source import Event
from pgshovel2.sinks.kafka import KafkaSink


@dataclass
class TableRoute:
    """Where a table's changes go and how they are encoded (envelope default: row)."""

    table: Table
    topic: str
    encoder: RowEncoder
    envelope: Envelope = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.envelope is None:
            self.envelope = RowEnvelope(self.encoder)


class Emitter:
    """Produces a set's messages to sink. routes: table tag -> TableRoute."""

    def __init__(self, set_name: str, routes: dict[str, TableRoute], txn_topic: str,
                 txn_writer: AvroWriter | None, sink: KafkaSink):
        self.set_name, self.routes, self.sink = set_name, routes, sink
        self.txn_topic, self._txn_writer = txn_topic, txn_writer
        self._counts: Counter[str] = Counter()
        self._order = TxnOrder()
        self.skipped_unkeyed_deletes = 0
        self.version = 0  # the set version the routes were built from: header pgshovel.version

    def switch(self, routes: dict[str, TableRoute], version: int, txn_writer: AvroWriter | None) -> None:
        """Use routes (table tag -> TableRoute) of set version from the next change on."""
        self.routes, self.version, self._txn_writer = routes, version, txn_writer

    def switch_table(self, route: TableRoute, version: int) -> None:
        """Use route for its table, and set version for every message, from the next change on."""
        self.routes = {**self.routes, route.table.qualified: route}
        self.version = version

    def _headers(self, op: str, txid: int, position: str, ts_ms: int) -> list[tuple[str, str]]:
        return [("pgshovel.op", op), ("pgshovel.txid", str(txid)), ("pgshovel.position", position),
                ("pgshovel.ts_ms", str(ts_ms)), ("pgshovel.set", self.set_name),
                ("pgshovel.version", str(self.version))]

    def _send(self, route: TableRoute, msg: Message, ctx: Context) -> None:
        self.sink.produce(route.topic, msg.key, msg.value,
                          self._headers(msg.op, ctx.txid, ctx.position, ctx.ts_ms))

    def snapshot_row(self, table: Table, row: list, position: str, ts_ms: int, last: bool = False) -> None:
        """Emit one snapshot row as op r (txid 0: no source transaction; not counted).

        last: this is the snapshot's last row (Debezium's ``snapshot: "last"``).
        """
        route = self.routes[table.qualified]
        ctx = Context(0, position, ts_ms, SNAPSHOT_LAST if last else SNAPSHOT_TRUE)
        try:
            msgs = route.envelope.read(row, ctx)
        except EncodeError as exc:
            raise EncodeError(f"{exc}; snapshot row at position {position}") from exc
        for msg in msgs:
            self._send(route, msg, ctx)

    def begin(self, txid: int, position: str, ts_ms: int) -> None:
        """Start a source transaction (BEGIN record)."""
        self._counts.clear()
        self._order = TxnOrder()
        self._record({"type": "BEGIN", "txid": txid, "position": position, "ts_ms": ts_ms,
                      "event_count": None, "data_collections": None, "table": None})

    def end(self, txid: int, position: str, ts_ms: int) -> None:
        """End a source transaction (END record with per-topic counts)."""
        self._record({"type": "END", "txid": txid, "position": position, "ts_ms": ts_ms,
                      "event_count": sum(self._counts.values()),
                      "data_collections": [{"data_collection": t, "event_count": n}
                                           for t, n in sorted(self._counts.items())],
                      "table": None})

    def _record(self, datum: dict) -> None:
        self.sink.produce(self.txn_topic, None, encode_record(datum, self._txn_writer),
                          [("pgshovel.set", self.set_name), ("pgshovel.version", str(self.version))])

    def change(self, ev: Event, position: str) -> None:
        """Emit the messages of one captured change (between begin and end of its txid)."""
        route = self.routes.get(ev.table)
        if route is None:
            raise RelayError(f"event for table {ev.table} which is not in set {self.set_name!r}; "
                             "the set's triggers and its ZooKeeper config disagree")
        if ev.op == "T":
            self._record({"type": "TRUNCATE", "txid": ev.txid, "position": position,
                          "ts_ms": ev.ts_ms, "event_count": None, "data_collections": None,
                          "table": route.topic})
            return
        ctx = Context(ev.txid, position, ev.ts_ms, order=self._order)
        try:
            msgs = route.envelope.change(ev.op, ev.row, ev.before, ctx)
        except EncodeError as exc:  # names table, column and type; the change stays unacknowledged
            raise EncodeError(f"{exc}; change {ev.op} of txid {ev.txid} at position {position}") from exc
        if not msgs:
            self.skipped_unkeyed_deletes += 1
        for msg in msgs:
            self._send(route, msg, ctx)
            self._counts[route.topic] += 1
