"""What the consumer library yields (Change, Transaction) and the decoded
messages it reassembles them from (DataMessage, TxnRecord)."""

from dataclasses import dataclass, field
from typing import Any

from pgshovel2 import names

SNAPSHOT_TXID = 0
"""pgshovel.txid of snapshot rows (op ``r``): they belong to no source transaction."""

# Transactions-topic records that mark a DDL's effect on a table (docs/wire.rst, "DDL on captured
# tables"), and the op of the Change each becomes in its transaction.
DDL_OPS = {"TABLE_DROPPED": "drop", "SCHEMA_CHANGED": "schema", "TOPIC_CHANGED": "topic"}


def fill_fields(value: dict[str, Any], previous: dict[str, Any], unchanged: frozenset[str]) -> dict[str, Any]:
    """A copy of value (a row, or a Debezium event whose ``after`` is filled) with the fields of the
    unchanged column names taken from previous (same form). A column's field is its name (JSON)
    or its escaped Avro name."""
    if "after" in value and "source" in value:
        prev = previous.get("after") if "after" in previous and "source" in previous else previous
        return {**value, "after": fill_fields(value["after"], prev, unchanged)}
    out = dict(value)
    for col in unchanged:
        fld = col if col in out else names.avro_name(col)
        out[fld] = previous.get(fld)
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """One change of a row (or a TRUNCATE of a table, or a DDL's mark on it).

    topic: the Kafka topic it was read from (for op ``t``, the truncated
    table's topic; the record itself is on the transactions topic; likewise
    for the DDL ops). table: ``schema.table``, unquoted. op: ``c`` create,
    ``u`` update, ``d`` delete, ``r`` snapshot read, ``t`` truncate; from a
    DDL (records TABLE_DROPPED, SCHEMA_CHANGED, TOPIC_CHANGED, docs/wire.rst):
    ``drop`` the table ended in the set (dropped: its rows are gone),
    ``schema`` its value schema changed incompatibly from here on (messages
    name their schema; nothing to apply), ``topic`` it goes on in another
    topic from here on (value ``{"new_topic": topic}``). key/value: decoded
    dicts (column field name -> value; see pgshovel2.consumer.decode), or
    the message bytes when read with ``SetReader(decode=False)``; None for a
    null key (unkeyed table), a tombstone (a keyed table's ``d``), a truncate
    or a DDL op. An unkeyed table's ``d`` carries the deleted row as its value,
    and its UPDATE is that ``d`` of the old row then a ``u`` of the new row at
    the same position (docs/wire.rst "Unkeyed tables"; RowState keeps such a
    table as a multiset).
    txid: source transaction (0 for snapshot rows). position: the relay's
    sortable position. ts_ms: capture time, ms since the epoch.
    partition/offset: where the message is in Kafka. version: the set version
    the message was encoded with (header ``pgshovel.version``; 0 when absent:
    older relays, and TRUNCATE). unchanged: names (exact column names) of the
    columns an UPDATE left unchanged whose values the source did not log
    (header ``pgshovel.unchanged``, docs/wire.rst): their fields in value are
    null and the row keeps its previous values (:meth:`fill_unchanged`,
    :class:`pgshovel2.consumer.state.RowState`); empty for every other change.
    truncated: column name -> its length before, of the columns the relay cut to fit Kafka (set
    policy ``oversized: truncate``, header ``pgshovel.truncated``): the value holds their starts
    only. dead_letter: the dead-letter topic the value was read back from (policy dead-letter:
    the message on the table's topic is a placeholder), else None.
    """

    topic: str
    table: str
    op: str
    key: dict[str, Any] | bytes | None
    value: dict[str, Any] | bytes | None
    txid: int
    position: str
    ts_ms: int
    partition: int
    offset: int
    version: int = 0
    unchanged: frozenset[str] = frozenset()
    truncated: dict[str, int] | None = None
    dead_letter: str | None = None

    def fill_unchanged(self, previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """The value with each unchanged column's field taken from previous (the row's value
        before this change, a decoded value of the same table, row envelope; or the ``after``
        of a Debezium event). The value itself when nothing is unchanged. Raises ValueError
        when values are bytes (``decode=False``) or previous is None while columns are
        unchanged (the previous value was never seen: the result would be wrong)."""
        if not self.unchanged or self.value is None:
            return self.value
        if not isinstance(self.value, dict) or (previous is not None and not isinstance(previous, dict)):
            raise ValueError(f"{self.topic} offset {self.offset}: unchanged columns need decoded values")
        if previous is None:
            raise ValueError(f"{self.topic} offset {self.offset}: columns {sorted(self.unchanged)} are unchanged "
                             "and the row's previous value is not known")
        return fill_fields(self.value, previous, self.unchanged)


@dataclass(frozen=True)
class Transaction:
    """A source transaction, complete, with its changes in source order.

    txid/position/ts_ms: those of its BEGIN record. snapshot: True for a
    chunk of snapshot rows (txid 0, every change op ``r``; position and ts_ms
    of the chunk's first row), which is not a source transaction.
    end_offset: offset of its END record on the transactions topic (None for
    snapshot chunks): a reader restarted at end_offset + 1 (and each data
    partition after the transaction's last message) resumes right after it.
    Changes are ordered by position; the tombstone of a primary-key update
    comes before the create of the new key (they share a position).
    """

    txid: int
    position: str
    ts_ms: int
    changes: list[Change] = field(default_factory=list)
    snapshot: bool = False
    end_offset: int | None = None


@dataclass(frozen=True, slots=True)
class DataMessage:
    """A data message of a table topic: headers parsed, key/value decoded (or bytes, see Change)."""

    topic: str
    partition: int
    offset: int
    op: str
    txid: int
    position: str
    ts_ms: int
    key: dict[str, Any] | bytes | None
    value: dict[str, Any] | bytes | None
    version: int = 0
    unchanged: frozenset[str] = frozenset()
    truncated: dict[str, int] | None = None
    dead_letter: str | None = None

    @property
    def is_snapshot(self) -> bool:
        """True for a snapshot row (txid 0)."""
        return self.txid == SNAPSHOT_TXID


@dataclass(frozen=True)
class TxnRecord:
    """A record of the transactions topic.

    kind: ``BEGIN``, ``END``, ``TRUNCATE``, ``SNAPSHOT_BEGIN``/``SNAPSHOT_END`` (a table's
    online snapshot starts / is complete: txid 0, event_count its rows at END), or a DDL's mark
    (``TABLE_DROPPED``, ``SCHEMA_CHANGED``, ``TOPIC_CHANGED``: :data:`DDL_OPS`). counts (END):
    data topic -> number of data messages of the transaction in it; TOPIC_CHANGED: {the topic
    the table goes on in: 0}. table (TRUNCATE, the snapshot records and the DDL marks): the
    table's topic (TOPIC_CHANGED: the one it leaves).
    """

    kind: str
    txid: int
    position: str
    ts_ms: int
    partition: int
    offset: int
    event_count: int | None = None
    counts: dict[str, int] | None = None
    table: str | None = None

    @classmethod
    def from_datum(cls, datum: dict[str, Any], partition: int, offset: int) -> "TxnRecord":
        """From a decoded record {type, txid, position, ts_ms, event_count, data_collections, table}."""
        collections = datum.get("data_collections")
        counts = None if collections is None else {c["data_collection"]: c["event_count"] for c in collections}
        return cls(datum["type"], datum["txid"], datum["position"], datum["ts_ms"], partition, offset,
                   datum.get("event_count"), counts, datum.get("table"))
