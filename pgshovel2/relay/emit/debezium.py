"""The ``debezium`` envelope (see :mod:`pgshovel2.relay.emit.envelopes` for the messages of each change):
Debezium 3.x PostgreSQL connector change events ``{before, after, source, transaction, op, ts_ms,
ts_us, ts_ns}`` (every field: docs/wire.rst).

Three paths write the same bytes (tests/unit/test_debezium_native.py): the native event writer
(``pgshovel2_native.DebeziumEvents``: whole events, messages and all), the native row codec with the
event spliced around its rows here (a native build without DebeziumEvents), and pure Python
(``PGSHOVEL2_NATIVE=0``, and any row or context the native code leaves to Python).
"""

import io
import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro

from pgshovel2 import __version__
from pgshovel2.codec import native
from pgshovel2.codec.avro import DEBEZIUM_TAIL_FIELDS, AvroWriter, envelope_row_schema
from pgshovel2.codec.avro_fast import compile_record
from pgshovel2.codec.connect import ConnectRowEncoder, unwrap, wrap
from pgshovel2.codec.rows import RowEncoder, as_values, encode_json
from pgshovel2.relay.emit import unavailable
from pgshovel2.relay.emit.envelopes import CONNECTOR, SNAPSHOT_FALSE, XID_MASK, Context, Message
from pgshovel2.wire import raw_schema

TRUNCATE_KEY_CONNECT = b'{"schema":null,"payload":null}'
TRUNCATE_KEY_JSON = b"null"


@dataclass(frozen=True)
class SourceInfo:
    """The fixed part of a table's Debezium ``source`` block (exact, unescaped names).

    name: the set name; db: the database name.
    """

    name: str
    db: str
    schema: str
    table: str


class DebeziumEnvelope:
    """The ``debezium`` envelope: Debezium PostgreSQL connector change events.

    writer: the registered Envelope schema's writer (Avro), None for JSON.
    collection: the data collection events are numbered in (the table's topic).
    clock: ns since the epoch, for the envelope's ``ts_ms``/``ts_us``/``ts_ns``
    (processing time, as Debezium's). truncate_events: a TRUNCATE of the table writes an
    ``op: t`` event (:meth:`truncate`; the set's ``debezium.skipped_operations`` lacks ``t``).
    A :class:`~pgshovel2.codec.connect.ConnectRowEncoder` makes every JSON value JsonConverter's
    ``{"schema", "payload"}`` (with Avro, writer's schema is codec.connect_avro's Envelope).
    placeholders: column index -> the capture form of Debezium's ``unavailable.value.placeholder``
    for that column (:func:`pgshovel2.relay.emit.unavailable.placeholders`; empty: unchanged values stay null).
    """

    def __init__(self, encoder: RowEncoder, source: SourceInfo, collection: str,
                 writer: AvroWriter | None = None, clock: Callable[[], int] = time.time_ns,
                 truncate_events: bool = False, placeholders: dict[int, Any] | None = None):
        self.encoder, self.source = encoder, source
        self.truncate_events = truncate_events
        self.placeholders = placeholders or {}
        self._writer, self._clock = writer, clock
        self._connect = encoder.schemas.envelope if isinstance(encoder, ConnectRowEncoder) and writer is None \
            else None
        self.collection = collection
        self._raw_envelope = self._raw_value = None
        if writer is not None:
            self._raw_envelope = fastavro.parse_schema(raw_schema(writer.schema))
            self._raw_value = fastavro.parse_schema(raw_schema(envelope_row_schema(writer.schema)))
        # the native codec writes keys and before/after bodies; _events (or _spliced) the events around them
        self._native = encoder.native_for(envelope_row_schema(writer.schema), b"") if writer is not None \
            else encoder.native
        self._tail = None  # Avro: the fields after before/after, compiled (avro_fast), when it can
        if writer is not None and [f["name"] for f in writer.schema["fields"][:2]] == ["before", "after"]:
            self._tail = compile_record({"type": "record", "name": "Tail", "fields": writer.schema["fields"][2:]})
        self._events = native_events(self._native, source, collection, writer, clock)

    @property
    def collection(self) -> str:
        """The data collection this table's events are numbered in (transaction block)."""
        return self._collection

    @collection.setter
    def collection(self, collection: str) -> None:
        self._collection = collection
        if getattr(self, "_events", None) is not None:
            self._events = native_events(self._native, self.source, collection, self._writer, self._clock)

    @property
    def value_writer(self) -> AvroWriter | None:
        """The writer of the event schema (Avro; None: JSON)."""
        return self._writer

    @property
    def events(self) -> Any:
        """The native writer of whole events (pgshovel2_native.DebeziumEvents), or None."""
        return self._events

    def read(self, row: list, ctx: Context) -> list[Message]:
        """(key, op r event with after = row, transaction null)."""
        if self._events is not None:
            out = self._events.read(row, ctx)
            if out is not None:
                return out
        conv = self.encoder.convert(as_values(row))
        return [self._event(self.encoder.key(conv), "r", None, conv, ctx)]

    def change(self, op: str, row: list, before: list | None, ctx: Context) -> list[Message]:
        """See the module docstring."""
        if self._events is not None:
            out = self._events.change(op, row, before, ctx)
            if out is not None:
                return out
        elif self._native is not None:
            out = self._native_change(op, row, before, ctx)
            if out is not None:
                return out
        enc = self.encoder
        conv = enc.convert(as_values(row))
        key = enc.key(conv)
        if op == "I":
            return [self._event(key, "c", None, conv, ctx)]
        if op == "D":
            deleted = [self._event(key, "d", conv, None, ctx)]
            return deleted + [Message(key, None, "d")] if key is not None else deleted
        old = enc.convert(as_values(before)) if before is not None else None
        old_key = enc.key(old) if old is not None else key
        if old_key == key:
            return [self._event(key, "u", old, conv, ctx)]
        return [self._event(old_key, "d", old, None, ctx), Message(old_key, None, "d"),
                self._event(key, "c", None, conv, ctx)]

    def fill_unchanged(self, row: Any, unchanged: tuple[int, ...]) -> Any:
        """row (an UPDATE's new row, capture form) with its unchanged, unlogged TOASTed values
        (positions unchanged) set to Debezium's placeholder where the column's form holds one
        (:mod:`pgshovel2.relay.emit.unavailable`); row itself when none is."""
        return unavailable.fill(row, unchanged, self.placeholders) if self.placeholders else row

    def truncate(self, ctx: Context) -> Message:
        """Debezium's truncate event of the table: ``before``/``after`` null, ``op: t``, source and
        transaction as for a change at ctx; its key is Connect's null key in JSON
        (``{"schema":null,"payload":null}``, or ``null`` without schemas: JsonConverter reads both
        as a null key), since Kafka refuses a Kafka-null key on a compacted table topic."""
        key = TRUNCATE_KEY_CONNECT if self._connect is not None else TRUNCATE_KEY_JSON
        return self._event(key, "t", None, None, ctx)

    def _native_change(self, op: str, row: Any, before: Any, ctx: Context) -> list[Message] | None:
        """:meth:`change` with rows encoded by the native codec; None (nothing done) when it leaves
        a row to Python."""
        got = self._native.encode(row, True)
        old = self._native.encode(before, True) if before is not None else None
        if got is None or (before is not None and old is None):
            return None
        key, body = got
        if op == "I":
            return [self._spliced(key, "c", None, body, ctx)]
        if op == "D":
            deleted = [self._spliced(key, "d", body, None, ctx)]
            return deleted + [Message(key, None, "d")] if key is not None else deleted
        old_key, old_body = old if old is not None else (key, None)
        if old_key == key:
            return [self._spliced(key, "u", old_body, body, ctx)]
        return [self._spliced(old_key, "d", old_body, None, ctx), Message(old_key, None, "d"),
                self._spliced(key, "c", None, body, ctx)]

    def _spliced(self, key: bytes | None, op: str, before: bytes | None, after: bytes | None,
                 ctx: Context) -> Message:
        """:meth:`_event` of rows already encoded (Avro record bodies or JSON objects): the same bytes,
        the rest of the event encoded as there with before and after null."""
        now_ns = self._clock()
        rest = {"source": self._source(ctx), "transaction": self._transaction(ctx), "op": op,
                "ts_ms": now_ns // 1_000_000, "ts_us": now_ns // 1_000, "ts_ns": now_ns}
        if self._writer is None:
            value = b"".join((b'{"before":', before or b"null", b',"after":', after or b"null", b",",
                              encode_json(rest)[1:]))
        else:
            value = b"".join((self._writer.header, b"\x00" if before is None else b"\x02" + before,
                              b"\x00" if after is None else b"\x02" + after, self._avro_tail(rest)))
        return Message(key, value, op)

    def _avro_tail(self, rest: dict[str, Any]) -> bytes:
        """The Avro body of the envelope's fields after before/after (compiled, else as fastavro
        writes the whole envelope with both null, cut after them)."""
        if self._tail is not None:
            try:
                return self._tail(rest)
            except (TypeError, AttributeError, OverflowError, struct.error):
                pass  # fastavro names the field
        return self.encoder.encode_avro(self._writer, {"before": None, "after": None, **rest})[7:]

    def _event(self, key: bytes | None, op: str, before: list | None, after: list | None,
               ctx: Context) -> Message:
        enc = self.encoder
        now_ns = self._clock()
        datum = {
            "before": enc.value_datum(before) if before is not None else None,
            "after": enc.value_datum(after) if after is not None else None,
            "source": self._source(ctx),
            "transaction": self._transaction(ctx),
            "op": op,
            "ts_ms": now_ns // 1_000_000,
            "ts_us": now_ns // 1_000,
            "ts_ns": now_ns,
        }
        if self._writer is not None:
            value = enc.encode_avro(self._writer, datum)
        elif self._connect is not None:
            value = wrap(self._connect, encode_json(datum))
        else:
            value = encode_json(datum)
        return Message(key, value, op)

    def _source(self, ctx: Context) -> dict[str, Any]:
        s = self.source
        ts_us = ctx.ts_us if ctx.ts_us is not None else ctx.ts_ms * 1000
        return {"version": __version__, "connector": CONNECTOR, "name": s.name, "ts_ms": ctx.ts_ms,
                "snapshot": ctx.snapshot, "db": s.db, "sequence": sequence(ctx.last_lsn, ctx.lsn),
                "ts_us": ts_us, "ts_ns": ts_us * 1000, "schema": s.schema, "table": s.table,
                "txId": ctx.txid & XID_MASK if ctx.snapshot == SNAPSHOT_FALSE else None, "lsn": ctx.lsn,
                "xmin": None, "position": ctx.position}

    def _transaction(self, ctx: Context) -> dict[str, Any] | None:
        if ctx.order is None:
            return None
        total, in_collection = ctx.order.next(self.collection)
        return {"id": transaction_id(ctx.txid, ctx.lsn), "total_order": total,
                "data_collection_order": in_collection}

    def row_image(self, converted: list) -> bytes:
        """The row's value datum, encoded without logical types (Avro) or as JSON."""
        return self._image(self.encoder.value_datum(converted))

    def images(self, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """(before, after) of an event, each as :meth:`row_image` encodes it; a tombstone: (None, None)."""
        if value is None:
            return None, None
        if self._writer is None:
            event = unwrap(json.loads(value))
        else:
            event = fastavro.schemaless_reader(io.BytesIO(value[5:]), self._raw_envelope)
        before, after = event["before"], event["after"]
        return (self._image(before) if before is not None else None,
                self._image(after) if after is not None else None)

    def fill_image(self, image: bytes, previous: bytes, fields: list[str]) -> bytes:
        """As RowEnvelope.fill_image, for after-images of :meth:`images`."""
        if self._writer is None:
            datum, prev = json.loads(image), json.loads(previous)
        else:
            datum = fastavro.schemaless_reader(io.BytesIO(image), self._raw_value)
            prev = fastavro.schemaless_reader(io.BytesIO(previous), self._raw_value)
        return self._image({**datum, **{f: prev.get(f) for f in fields}})

    def _image(self, datum: dict[str, Any]) -> bytes:
        if self._writer is None:
            return encode_json(datum)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._raw_value, datum)
        return buf.getvalue()



def native_events(rows: Any, source: SourceInfo, collection: str, writer: AvroWriter | None,
                  clock: Callable[[], int]) -> Any:
    """The native writer of whole events (pgshovel2_native.DebeziumEvents) around rows (the table's
    native RowCodec of before/after records), or None: no native codec, a build without
    DebeziumEvents, or an Avro writer whose fields after before/after are not those of
    avro.debezium_value_schema (the layout the native writer knows)."""
    mod = native.module()
    if rows is None or mod is None or not hasattr(mod, "DebeziumEvents"):
        return None
    if writer is not None and writer.schema.get("fields", [])[2:] != DEBEZIUM_TAIL_FIELDS:
        return None
    header = writer.header if writer is not None else b""
    try:
        return mod.DebeziumEvents(rows, writer is not None, header, (__version__, CONNECTOR, source.name,
                                  source.db, source.schema, source.table), collection, clock, Message)
    except UnicodeEncodeError:  # a name with no UTF-8 form: Python's path names the error per event
        return None


def sequence(last_lsn: int | None, lsn: int | None) -> str | None:
    """Debezium's PostgreSQL ``source.sequence``: the JSON array text ``["<last committed LSN>",
    "<LSN>"]`` (decimal strings, null where unknown; Jackson's compact form), None without an LSN."""
    if lsn is None:
        return None
    return json.dumps([None if last_lsn is None else str(int(last_lsn)), str(int(lsn))], separators=(",", ":"))


def transaction_id(txid: int, lsn: int | None) -> str:
    """``transaction.id``: Debezium's ``"<xid>:<LSN of the event>"`` when the LSN is known (the 32-bit
    xid, as Debezium's source.txId), else the 64-bit epoch txid, unique without an LSN."""
    return f"{txid & XID_MASK}:{int(lsn)}" if lsn is not None else str(txid)
