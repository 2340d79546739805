"""Drift audit against Iceberg: a set's source tables against their materialized Iceberg tables
(Hadoop catalog layout ``WAREHOUSE/<set>/<schema>/<table>/metadata``, written by ``materialize
--format iceberg``), compared at one position while writes go on.

A round first reads each Iceberg table's current snapshot with PyIceberg, and where it holds the
Kafka offsets it is complete up to: a MERGE's snapshot summary names its micro-batch's end offsets
(``pgshovel.kafka-end-offsets``); a table no MERGE wrote yet holds the bootstrap's copy, complete
before the start offsets in its properties (``pgshovel.kafka-offsets``). Then it reads the source
tables in one REPEATABLE READ snapshot S (every table at one position, taken after the Iceberg
snapshots: all they hold was committed before S), waits until the relay has relayed everything
committed before S, and reads each table's topic from those offsets on. A key with a message there
that the state at S includes (:class:`pgshovel2.ops.audit_kafka.AuditPoint`: its transaction is
visible in S) is in flight -- changed at the source after what Iceberg holds -- and is not
compared; a TRUNCATE in flight puts the whole table in flight. Every other key has the same value
at S and in the Iceberg snapshot unless something drifted, so one round is exact: a key that
differs is named, and in-flight keys are counted.

A table whose snapshot records no offsets (merged by an older materialize) is compared as is, at
different positions: then ``rounds`` > 1 keeps only keys that differ in every round with the same
source row. Keys from Kafka are matched with the source's as decoded values (integer and text keys
match exactly; other key types may differ in form). Values are compared as Python values
(psycopg2 vs Arrow): exact for integers, floats, text, bool and bytes; other types may differ in
form.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgshovel2 import backends, names
from pgshovel2.bootstrap.iceberg_keys import BATCH_KEY, END_OFFSETS_KEY, OFFSETS_KEY
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.decode import Decoder
from pgshovel2.kafkaconf import Kafka
from pgshovel2.ops import status, verify
from pgshovel2.ops.audit import AuditError, Row, TableDrift, differing_keys, in_rounds, require_keys
from pgshovel2.ops.audit_kafka import AuditPoint, take_point
from pgshovel2.registryconf import Registry
from pgshovel2.setrecord import SetRecord

Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class IcebergState:
    """One Iceberg table at its current snapshot.

    snapshot_id: the snapshot read (None for a table without one). rows: key tuple -> row (the
    captured columns in order). offsets: {(topic, partition): offset} the snapshot is complete up
    to (exclusive); None when it records none. batch: the MERGE's micro-batch id ('' for the
    bootstrap's copy).
    """

    snapshot_id: int | None
    rows: dict[tuple, Row]
    offsets: Offsets | None
    batch: str

    def describe(self) -> str:
        where = f"Iceberg snapshot {self.snapshot_id}" + (f" (micro-batch {self.batch})" if self.batch else "")
        return where if self.offsets is not None else f"{where}, no Kafka offsets recorded: not at one position"


def metadata_file(warehouse: str, set_name: str, table: Table) -> Path:
    """The current metadata file of the table's Iceberg table (version-hint.text). Raises AuditError."""
    folder = Path(warehouse) / set_name / table.schema / table.name / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        raise AuditError(f"no Iceberg table for {table.qualified} of set {set_name!r} under {warehouse}")
    return folder / f"v{hint.read_text().strip()}.metadata.json"


def read_state(warehouse: str, set_name: str, table: Table) -> IcebergState:
    """The table's Iceberg table at its current snapshot, read by PyIceberg. Raises AuditError for
    no table or unreadable recorded offsets."""
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(str(metadata_file(warehouse, set_name, table)))
    snapshot = static.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}
    batch = summary.get(BATCH_KEY, "")
    text = summary.get(END_OFFSETS_KEY) if batch else static.properties.get(OFFSETS_KEY)
    cols = [c.name for c in table.columns]
    data = [] if snapshot is None else static.scan(selected_fields=tuple(cols),
                                                   snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
    rows = {tuple(r[k] for k in table.key): tuple(_norm(r[c]) for c in cols) for r in data}
    return IcebergState(None if snapshot is None else snapshot.snapshot_id, rows,
                        None if text is None else _offsets(text, table), batch)


def _offsets(text: str, table: Table) -> Offsets:
    try:
        return {(t, int(p)): int(o) for t, parts in json.loads(text).items() for p, o in parts.items()}
    except (ValueError, AttributeError) as e:
        raise AuditError(f"the Kafka offsets recorded in the Iceberg table of {table.qualified} are "
                         f"unreadable ({e}): {text[:200]!r}") from e


def source_rows(cur, table: Table) -> dict[tuple, Row]:
    """key tuple -> row of the source table in cur's snapshot."""
    cols = [c.name for c in table.columns]
    cur.execute(f"SELECT {', '.join(names.quote_ident(c) for c in cols)} FROM {table.sql_name}")
    index = [cols.index(k) for k in table.key]
    return {tuple(r[i] for i in index): tuple(_norm(v) for v in r) for r in cur.fetchall()}


def _norm(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def in_flight(messages: list, point: AuditPoint, key_of: Callable[[bytes], tuple]) -> set[tuple]:
    """Keys (key_of(Kafka key)) of messages ((key, value, headers), read after an Iceberg snapshot's
    offsets) that the state at point includes. Raises ValueError for malformed headers."""
    return {key_of(key) for key, _, headers in messages if key is not None and point.includes(headers)}


def key_tuple(decoder: Decoder, table: Table, topic: str) -> Callable[[bytes], tuple]:
    """Kafka key bytes of table's topic -> the key tuple (values of table.key, decoded)."""
    def key_of(key: bytes) -> tuple:
        decoded = decoder.decode(key, f"a key of topic {topic}")
        fields = [c.name for c in table.key_columns]  # the key's own fields (Table.key_layout after a rename)
        return tuple(decoded[c] for c in fields) if isinstance(decoded, dict) else (decoded,)
    return key_of


def audit(store: ClusterStore, record: SetRecord, warehouse: str, bootstrap: Kafka, registry_url: Registry | None,
          rounds: int = 1, pause: float = 5.0, bucket_rows: int = 1000, timeout: float = 120.0) -> list[TableDrift]:
    """Compare every table of the set with its Iceberg table (see the module docstring).

    rounds/pause: as :func:`pgshovel2.ops.audit.in_rounds`. timeout (s): how long a round waits
    for the relay. Raises AuditError (a table without key or Iceberg table), RelayError (relay not
    caught up in time), ConsumerError (an undecodable key), psycopg2.Error from the source.
    """
    require_keys(record)
    decoder = Decoder(registry_url)
    return in_rounds(lambda: _round(store, record, warehouse, bootstrap, decoder, bucket_rows, timeout),
                     rounds, pause)


def _round(store: ClusterStore, record: SetRecord, warehouse: str, bootstrap: Kafka, decoder: Decoder,
           bucket_rows: int, timeout: float) -> tuple[list[TableDrift], dict]:
    states = {t.qualified: read_state(warehouse, record.name, t) for t in record.tables}
    with backends.reader(record, AuditError) as snap:
        point = take_point(record, snap)
        missing = verify.missing_tables(snap, list(record.tables))
        with snap.conn.cursor() as cur:
            sources = {t.qualified: source_rows(cur, t) for t in record.tables if t.qualified not in missing}
    if any(s.offsets is not None for s in states.values()):
        status.wait_caught_up(store, record.name, bootstrap, timeout)
    results = [TableDrift(e["table"], 0, 0, 0, [], str(point), note=f"dropped at position {e['position']}: ended "
                          "in the set, not compared") for e in verify.ended_tables(record)]
    found: dict[str, dict] = {}
    for table in record.tables:
        if table.qualified in missing:
            results.append(TableDrift(table.qualified, 0, 0, 0, [], str(point), note=verify.MISSING))
            continue
        state, source = states[table.qualified], sources[table.qualified]
        flight, truncated = _in_flight(record, table, state, point, bootstrap, decoder)
        present = set(source) | set(state.rows)
        if truncated:
            flight = present
        ours = {k: v for k, v in source.items() if k not in flight}
        theirs = {k: v for k, v in state.rows.items() if k not in flight}
        buckets, bad, keys = differing_keys(ours, theirs, bucket_rows)
        where = f"{state.describe()}; {point}" + (", a TRUNCATE in flight" if truncated else "")
        results.append(TableDrift(table.qualified, len(source), buckets, bad, sorted(keys), where,
                                  len(flight & present)))
        found[table.qualified] = {k: source.get(k) for k in keys}
    return results, found


def _in_flight(record: SetRecord, table: Table, state: IcebergState, point: AuditPoint, bootstrap: Kafka,
               decoder: Decoder) -> tuple[set[tuple], bool]:
    """(keys in flight, a TRUNCATE in flight) of table: its topic's and the transaction topic's
    messages from the snapshot's offsets on that point includes."""
    if state.offsets is None:
        return set(), False
    topic, txn_topic = record.topic(table), record.topics.transactions
    messages = verify.read_topics(bootstrap, [topic, txn_topic], start=state.offsets)
    truncates = verify.truncates(messages[txn_topic], verify.txn_decoder(record), point.snapshot.visible)
    return in_flight(messages[topic], point, key_tuple(decoder, table, topic)), topic in truncates
