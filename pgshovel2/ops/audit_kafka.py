"""Drift audit against Kafka: a set's source tables against the state rebuilt from its topics,
compared exactly at one position while writes go on.

A round reads every table in one REPEATABLE READ snapshot S (``txid_current_snapshot()``), then
waits until the relay has relayed everything committed before that (:func:`pgshovel2.ops.status.
wait_caught_up`), reads the set's topics to their ends and rebuilds each table from the
messages that are in the state at S:

- a change (``c``/``u``/``d``, a tombstone, a TRUNCATE record): its transaction's txid
  (``pgshovel.txid``) is visible in S -- the same rule as a copy's handoff, exact for both
  backends. Changes of transactions S does not see are left out, so Kafka messages newer than
  S never show as drift.
- a snapshot row (``r``, txid 0): by the unit of its ``pgshovel.position``. Trigger: the tick is
  one S sees (``last_tick_id`` of the queue in S): the tick's snapshot is older than S. Logical:
  the LSN is below the WAL insert position read in the statement that took S. A chunk of an
  online snapshot holds, for every key it carries, the value of every point between its two
  watermarks (LOW, HIGH; its rows are placed at HIGH), so including it is right wherever S falls
  between them, and leaving it out is right for a table Kafka held before. Its placement can be
  wrong only when a whole chunk -- LOW, its read, HIGH -- commits between S and the end of that
  one statement (logical), or HIGH's tick is taken before S and committed after it (trigger);
  a second round does not repeat such an instant.

Rows are compared as encoded bytes (the source rows encoded by the set's codec, as ``set
verify`` does): exact for every type. Checksums are per bucket of encoded keys (a hash of the
key bytes); keys of differing buckets are compared one by one and named (decoded from Kafka's
key). Rebuild rule and its limits are ``set verify``'s (pgshovel2.ops.verify): a key last
written before a change of the set's columns differs in form.
"""

from collections import Counter
from dataclasses import dataclass

from pgshovel2 import backends, wire
from pgshovel2.backends import lifecycle
from pgshovel2.backends.snapshot import TableReader
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.ops import status, verify
from pgshovel2.ops.audit import AuditError, TableDrift, differing_keys, in_rounds
from pgshovel2.registryconf import Registry
from pgshovel2.relay import table_routes
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry
from pgshovel2.txids import TxidSnapshot


@dataclass(frozen=True)
class AuditPoint:
    """Where a round compares: the source's txid snapshot and the bound of snapshot rows.

    snapshot: ``txid_current_snapshot()`` the source tables were read in. logical: the set's
    backend is logical. row_bound: trigger, the queue's last tick id visible in snapshot; logical,
    the WAL insert LSN read in the statement that took it.
    """

    snapshot: TxidSnapshot
    logical: bool
    row_bound: int

    def includes(self, headers: dict[str, str]) -> bool:
        """True when the data message (its headers) is part of the state at this point.
        Raises ValueError for a malformed pgshovel.position or pgshovel.txid."""
        _, unit, snapshot_row, _ = wire.parse_header(headers.get(wire.POSITION, ""))
        if snapshot_row:
            return unit < self.row_bound if self.logical else unit <= self.row_bound
        return self.snapshot.visible(int(headers[wire.TXID]))

    def __str__(self) -> str:
        return f"txid snapshot {self.snapshot}"


def audit(store: ClusterStore, record: SetRecord, bootstrap: Kafka, registry_url: Registry | None,
          rounds: int = 1, pause: float = 5.0, timeout: float = 120.0) -> list[TableDrift]:
    """Compare every table of the set with the state rebuilt from Kafka (module docstring).

    rounds/pause: as :func:`pgshovel2.ops.audit.in_rounds`; one round is exact. timeout (s): how
    long a round waits for the relay. Raises RelayError (relay not caught up in time, source
    unreachable), ConsumerError (an undecodable key).
    """
    registry = SchemaRegistry(registry_url, max_wait=30) if registry_url else None
    routes, _ = table_routes(record, registry)
    decoder = Decoder(registry_url)
    return in_rounds(lambda: _round(store, record, routes, decoder, bootstrap, timeout), rounds, pause)


def _round(store: ClusterStore, record: SetRecord, routes: dict, decoder: Decoder, bootstrap: Kafka,
           timeout: float) -> tuple[list[TableDrift], dict[str, dict]]:
    point, sources = _read_source(record, routes)
    status.wait_caught_up(store, record.name, bootstrap, timeout)
    txn_topic = record.topics.transactions
    messages = verify.read_topics(bootstrap, [r.topic for r in routes.values()] + [txn_topic])
    truncates = verify.truncates(messages[txn_topic], verify.txn_decoder(record), point.snapshot.visible)
    results = [TableDrift(e["table"], 0, 0, 0, [], str(point), note=f"dropped at position {e['position']}: ended "
                          "in the set, not compared") for e in verify.ended_tables(record)]
    found: dict[str, dict] = {}
    for route in routes.values():
        if route.table.qualified not in sources:
            results.append(TableDrift(route.table.qualified, 0, 0, 0, [], str(point), note=verify.MISSING))
            continue
        kept = [m for m in messages[route.topic] if point.includes(m[2])]
        rebuilt = verify.rebuilt_rows(verify.rebuild(kept, truncates.get(route.topic, ""), route.envelope))
        keyed = bool(route.table.key)
        source, kafka = (sources[route.table.qualified][0], rebuilt[0]) if keyed else \
            (_occurrences(sources[route.table.qualified][1]), _occurrences(rebuilt[1]))
        buckets, bad, keys = differing_keys({(k,): v for k, v in source.items()},
                                            {(k,): v for k, v in kafka.items()}, 1)
        shown = {_shown(decoder, k[0], route.topic): source.get(k[0]) for k in keys}
        rows = len(source) if keyed else sum(source.values())
        results.append(TableDrift(route.table.qualified, rows, buckets, bad, sorted(shown, key=repr), str(point)))
        found[route.table.qualified] = shown
    return results, found


def _occurrences(counts: Counter) -> dict[bytes, int]:
    """An unkeyed table's multiset (row image -> occurrences) without its empty entries."""
    return {image: n for image, n in counts.items() if n}


def _read_source(record: SetRecord, routes: dict) -> tuple[AuditPoint, dict[str, tuple[dict, Counter]]]:
    """(the point, table -> (key bytes -> row image, Counter of unkeyed row images): verify.source_images)
    of the source tables in one snapshot."""
    with backends.reader(record, AuditError) as snap:
        point = take_point(record, snap)
        missing = verify.missing_tables(snap, [r.table for r in routes.values()])
        sources = {r.table.qualified: verify.source_images(r.table, r.envelope, snap) for r in routes.values()
                   if r.table.qualified not in missing}
    return point, sources


def take_point(record: SetRecord, snap: TableReader) -> AuditPoint:
    """The point of snap (a reader of the set's database, backends.reader): its txid snapshot and
    the bound of snapshot rows (AuditPoint). Raises AuditError for a standby (logical sets)."""
    with snap.conn.cursor() as cur:
        bound = lifecycle.stream_bound(cur, record, snap.wal_insert_lsn)
    if bound is None:
        raise AuditError(f"the database of set {record.name!r} is a standby: audit its primary")
    return AuditPoint(TxidSnapshot.parse(snap.txid_snapshot), record.logical, bound)


def _shown(decoder: Decoder, key: bytes, topic: str) -> tuple:
    """A key's values, decoded from its Kafka key (an unkeyed table's: the row's, from its image),
    for the report; the bytes themselves when they do not decode (a Debezium Avro row image)."""
    try:
        decoded = decoder.decode(key, f"a key of topic {topic}")
    except ConsumerError:
        return (key,)
    return tuple(decoded.values()) if isinstance(decoded, dict) else (decoded,)
