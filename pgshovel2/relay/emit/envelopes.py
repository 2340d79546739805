"""Envelopes: how one captured change of a table becomes data messages (WIRE.md "Values").

A set's envelope is chosen at relay setup (:mod:`pgshovel2.relay.emit.routes`), one
instance per table. An envelope only builds messages; the
:class:`~pgshovel2.relay.emit.emitter.Emitter` frames transactions, adds the
``pgshovel.*`` headers, produces and counts.

``row`` (:class:`RowEnvelope`), value = the after-image::

    INSERT            -> (key, row, c)
    UPDATE            -> (key, row, u)
    UPDATE of the key -> (old key, None, d), (key, row, c)
    DELETE            -> (key, None, d)
    snapshot row      -> (key, row, r)

and for an unkeyed table (``allow_unkeyed``: null keys, topics with cleanup.policy=delete), every
change carries the row images a consumer needs to keep the table as a multiset::

    INSERT            -> (None, row, c)
    UPDATE            -> (None, old row, d), (None, row, u)   (one position)
    DELETE            -> (None, old row, d)                   (a value, not a tombstone)
    snapshot row      -> (None, row, r)

An unkeyed table's UPDATE must come with its old row and its DELETE with its row (the trigger
backend captures them, the logical backend needs REPLICA IDENTITY FULL); the emitter refuses one
without (:class:`~pgshovel2.relay.emit.emitter.Emitter`), so an envelope never sees it.

``debezium`` (:class:`DebeziumEnvelope`), value = a Debezium 3.x PostgreSQL change event
``{before, after, source, transaction, op, ts_ms, ts_us, ts_ns}`` (every field: docs/wire.rst)::

    INSERT            -> (key, {before: null, after: row, op: c})
    UPDATE            -> (key, {before: old row, after: row, op: u})
                         (trigger sets capture every UPDATE's old row; a logical set's table
                         without REPLICA IDENTITY FULL: before null, or the identity's columns
                         only, as Debezium)
    UPDATE of the key -> (old key, {before: old row, after: null, op: d}),
                         (old key, None) tombstone, (key, {before: null, after: row, op: c})
    DELETE            -> (key, {before: old row, after: null, op: d}), (key, None) tombstone;
                         an unkeyed table: (None, {... op: d}) and no tombstone
                         (an unkeyed table's UPDATE: (None, {before: old row, after: row, op: u}))
    snapshot row      -> (key, {before: null, after: row, op: r, transaction: null})

TRUNCATE: the emitter writes it to the transactions topic; a debezium set whose
``debezium.skipped_operations`` lacks ``t`` also writes the envelope's ``op: t`` event
(:meth:`~pgshovel2.relay.emit.debezium.DebeziumEnvelope.truncate`).
"""

import io
import json
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol

import fastavro

from pgshovel2.codec.rows import RowEncoder, as_values, encode_json
from pgshovel2.wire import raw_schema

CONNECTOR = "pgshovel"
# Debezium's source.snapshot values (io.debezium.connector.SnapshotRecord)
SNAPSHOT_FALSE, SNAPSHOT_TRUE, SNAPSHOT_LAST = "false", "true", "last"
SNAPSHOT_FIRST, SNAPSHOT_FIRST_IN_COLLECTION = "first", "first_in_data_collection"
SNAPSHOT_LAST_IN_COLLECTION = "last_in_data_collection"
SNAPSHOT_INCREMENTAL = "incremental"  # rows of an online snapshot (pgshovel2.relay.snapshot.online)
XID_MASK = 0xFFFFFFFF  # a 64-bit epoch txid's 32-bit xid


class Message(NamedTuple):
    """One data message: key and value bytes (None: Kafka null) and its ``pgshovel.op`` header."""

    key: bytes | None
    value: bytes | None
    op: str


class TxnOrder:
    """1-based order of the events of one source transaction, overall and per data collection.

    Tombstones are not events (Debezium does not number them either).
    """

    def __init__(self) -> None:
        self.total = 0
        self._per: Counter[str] = Counter()

    def next(self, collection: str) -> tuple[int, int]:
        """Number the next event of collection: (total_order, data_collection_order)."""
        self.total += 1
        self._per[collection] += 1
        return self.total, self._per[collection]

    def at(self, collection: str) -> int:
        """The data_collection_order of collection's last event so far (0: none yet)."""
        return self._per[collection]

    def advance(self, collection: str, events: int) -> None:
        """Count events of collection numbered elsewhere (the native lane), as that many next()."""
        self.total += events
        self._per[collection] += events


class Context(NamedTuple):
    """Where a change sits in the stream.

    txid: source txid, 64-bit with epoch (0 for snapshot rows); position:
    ``pgshovel.position``; ts_ms: capture time, ms since the epoch (the
    snapshot's time for snapshot rows); snapshot: ``"false"`` for changes,
    else the row's Debezium snapshot marker (:class:`SnapshotMarks`); order:
    the source transaction's event numbering, None for snapshot rows. From
    the logical backend only (None otherwise): lsn, the change's own LSN (a
    snapshot row: the slot's consistent point); last_lsn, the LSN up to which
    the stream was completely processed before the change's transaction
    (:class:`~pgshovel2.relay.logical.source.Begin`); ts_us, the capture time in
    µs when it is known finer than ts_ms (the commit time).
    """

    txid: int
    position: str
    ts_ms: int
    snapshot: str = SNAPSHOT_FALSE
    order: TxnOrder | None = None
    lsn: int | None = None
    last_lsn: int | None = None
    ts_us: int | None = None


class SnapshotMarks:
    """Gives each row of a snapshot its Debezium ``source.snapshot`` marker, one row behind.

    Debezium 3.x marks the first row of the snapshot ``first``, the first row of
    each other table ``first_in_data_collection``, the last row of each table
    ``last_in_data_collection``, the very last row ``last`` (these win, in the
    order ``last``, ``first``, ``last_in_data_collection``), every other row
    ``true``. :meth:`add` queues a row and passes the row before it to
    emit(item, marker); :meth:`finish` passes the last one, marked ``last``.
    Rows of one table must come together; collection identifies the table.
    Unlike Debezium, an empty first or last table does not lose the
    ``first``/``last`` marker: they go to the first and last rows written.
    """

    def __init__(self, emit: Callable[[Any, str], None]):
        self._emit = emit
        self._pending: tuple[Hashable, Any, bool] | None = None  # (collection, item, first in it)
        self._first = True

    def add(self, collection: Hashable, item: Any) -> None:
        """Queue item, a row of collection; emit the row queued before it."""
        pending = self._pending
        starts = pending is None or pending[0] != collection
        if pending is not None:
            self._flush(last_in_collection=starts, last=False)
        self._pending = (collection, item, starts)

    def finish(self) -> None:
        """Emit the queued row as the snapshot's last (nothing when no row was added)."""
        if self._pending is not None:
            self._flush(last_in_collection=True, last=True)
            self._pending = None

    def _flush(self, last_in_collection: bool, last: bool) -> None:
        _, item, first_in_collection = self._pending
        if last:
            marker = SNAPSHOT_LAST
        elif self._first:
            marker = SNAPSHOT_FIRST
        elif last_in_collection:
            marker = SNAPSHOT_LAST_IN_COLLECTION
        elif first_in_collection:
            marker = SNAPSHOT_FIRST_IN_COLLECTION
        else:
            marker = SNAPSHOT_TRUE
        self._first = False
        self._emit(item, marker)


class Envelope(Protocol):
    """Builds the data messages of one table's changes; ops are the trigger's I/U/D.

    uses_context (optional, default True): False when :meth:`change` ignores its ctx, so the
    emitter need not build one per change.
    """

    encoder: RowEncoder

    def read(self, row: list, ctx: Context) -> list[Message]:
        """Messages of one snapshot row (trigger form)."""

    def change(self, op: str, row: list, before: list | None, ctx: Context) -> list[Message]:
        """Messages of one I/U/D change; row: new row (old row for D), before: old row or None."""

    def row_image(self, converted: list) -> bytes:
        """A converted source row in the form :meth:`images` returns (for verification)."""

    def images(self, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """(before, after) images of a message value, comparable with :meth:`row_image`."""

    def fill_image(self, image: bytes, previous: bytes, fields: list[str]) -> bytes:
        """image with the value fields taken from previous (both after-images of :meth:`images`)."""


class RowEnvelope:
    """The ``row`` envelope: value = the after-image; a keyed table's deletes are tombstones, an
    unkeyed table's carry the deleted row (op ``d``), and its UPDATEs are the old row's ``d`` then
    the new row's ``u`` (module docstring).

    uses_context: False, :meth:`change` reads nothing of its Context (the emitter passes None).
    """

    uses_context = False

    def __init__(self, encoder: RowEncoder):
        self.encoder = encoder

    def read(self, row: list, ctx: Context) -> list[Message]:
        """(key, row, r)."""
        got = self.encoder.encode_native(row)
        if got is not None:
            return [Message(got[0], got[1], "r")]
        conv = self.encoder.convert(as_values(row))
        return [Message(self.encoder.key(conv), self.encoder.value(conv), "r")]

    def change(self, op: str, row: Any, before: Any, ctx: Context | None) -> list[Message]:
        """See the module docstring (an unkeyed table's UPDATE without its old row is only its
        ``u``: the emitter refuses it before). Rows: JSON text or lists."""
        enc = self.encoder
        if enc.native is not None:
            out = self._native_change(op, row, before)
            if out is not None:
                return out
        conv = enc.convert(as_values(row))
        key = enc.key(conv)
        if op == "D":
            return [Message(key, None if key is not None else enc.value(conv), "d")]
        out = []
        new_op = "c" if op == "I" else "u"
        if before is not None:
            old = enc.convert(as_values(before))
            old_key = enc.key(old)
            if old_key is None:
                out.append(Message(None, enc.value(old), "d"))
            elif old_key != key:
                out.append(Message(old_key, None, "d"))
                new_op = "c"
        out.append(Message(key, enc.value(conv), new_op))
        return out

    def _native_change(self, op: str, row: Any, before: Any) -> list[Message] | None:
        """:meth:`change` by the native codec; None when it leaves a row to Python."""
        enc = self.encoder
        got = enc.native.encode(row, True)  # every value, as convert() checks them all
        if got is None:
            return None
        key, value = got
        if op == "D":
            return [Message(key, None if key is not None else value, "d")]
        if before is None:
            return [Message(key, value, "c" if op == "I" else "u")]
        old = enc.native.encode(before, True)
        if old is None:
            return None
        if old[0] is None:
            return [Message(None, old[1], "d"), Message(None, value, "c" if op == "I" else "u")]
        if old[0] != key:
            return [Message(old[0], None, "d"), Message(key, value, "c")]
        return [Message(key, value, "c" if op == "I" else "u")]

    def row_image(self, converted: list) -> bytes:
        """The value bytes of the row."""
        return self.encoder.value(converted)

    def images(self, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """(None, value): the value is the after-image, a tombstone has none."""
        return None, value

    def fill_image(self, image: bytes, previous: bytes, fields: list[str]) -> bytes:
        """image (an after-image of :meth:`images`) with fields (value field names: escaped with
        Avro, see RowEncoder.value_datum) taken from previous: the row an UPDATE with unchanged,
        unlogged values (``pgshovel.unchanged``) leaves."""
        writer = self.encoder.value_writer
        if writer is None:
            datum, prev = json.loads(image), json.loads(previous)
            return encode_json({**datum, **{f: prev.get(f) for f in fields}})
        raw = fastavro.parse_schema(raw_schema(writer.schema))
        datum = fastavro.schemaless_reader(io.BytesIO(image[5:]), raw)
        prev = fastavro.schemaless_reader(io.BytesIO(previous[5:]), raw)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, raw, {**datum, **{f: prev.get(f) for f in fields}})
        return image[:5] + buf.getvalue()
