"""Turns captured changes into Kafka messages of the ``row`` envelope (WIRE.md).

INSERT -> op c, UPDATE -> op u (a key change: tombstone of the old key, op d,
then the new key, op c), DELETE -> tombstone (op d; not emitted for unkeyed
tables), TRUNCATE -> a record on the transactions topic, snapshot row -> op r.
Every source transaction is framed by BEGIN and END records on the
transactions topic; END carries per-topic event counts.
"""

from collections import Counter
from dataclasses import dataclass

from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder, encode_record
from pgshovel2.errors import RelayError
from pgshovel2.relay.pgq_source import Event
from pgshovel2.sinks.kafka import KafkaSink


@dataclass
class TableRoute:
    """Where a table's changes go and how they are encoded."""

    table: Table
    topic: str
    encoder: RowEncoder


class Emitter:
    """Produces a set's messages to sink. routes: table tag -> TableRoute."""

    def __init__(self, set_name: str, routes: dict[str, TableRoute], txn_topic: str,
                 txn_writer: AvroWriter | None, sink: KafkaSink):
        self.set_name, self.routes, self.sink = set_name, routes, sink
        self.txn_topic, self._txn_writer = txn_topic, txn_writer
        self._counts: Counter[str] = Counter()
        self.skipped_unkeyed_deletes = 0

    def _headers(self, op: str, txid: int, position: str, ts_ms: int) -> list[tuple[str, str]]:
        return [("pgshovel.op", op), ("pgshovel.txid", str(txid)), ("pgshovel.position", position),
                ("pgshovel.ts_ms", str(ts_ms)), ("pgshovel.set", self.set_name)]

    def _send(self, route: TableRoute, key: bytes | None, value: bytes | None, headers: list) -> None:
        self.sink.produce(route.topic, key, value, headers)
        self._counts[route.topic] += 1

    def snapshot_row(self, table: Table, row: list, position: str, ts_ms: int) -> None:
        """Emit one snapshot row as op r (txid 0: no source transaction)."""
        route = self.routes[table.qualified]
        conv = route.encoder.convert(row)
        self.sink.produce(route.topic, route.encoder.key(conv), route.encoder.value(conv),
                          self._headers("r", 0, position, ts_ms))

    def begin(self, txid: int, position: str, ts_ms: int) -> None:
        """Start a source transaction (BEGIN record)."""
        self._counts.clear()
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
                          [("pgshovel.set", self.set_name)])

    def change(self, ev: Event, position: str) -> None:
        """Emit the messages of one captured change."""
        route = self.routes.get(ev.table)
        if route is None:
            raise RelayError(f"event for table {ev.table} which is not in set {self.set_name!r}; "
                             "the set's triggers and its ZooKeeper config disagree")
        if ev.op == "T":
            self._record({"type": "TRUNCATE", "txid": ev.txid, "position": position,
                          "ts_ms": ev.ts_ms, "event_count": None, "data_collections": None,
                          "table": route.topic})
            return
        enc = route.encoder
        conv = enc.convert(ev.row)
        key = enc.key(conv)
        if ev.op == "D":
            if key is None:
                self.skipped_unkeyed_deletes += 1
                return
            self._send(route, key, None, self._headers("d", ev.txid, position, ev.ts_ms))
            return
        op = "c" if ev.op == "I" else "u"
        if ev.before is not None:
            old_key = enc.key(enc.convert(ev.before))
            if old_key != key:
                self._send(route, old_key, None, self._headers("d", ev.txid, position, ev.ts_ms))
                op = "c"
        self._send(route, key, enc.value(conv), self._headers(op, ev.txid, position, ev.ts_ms))
