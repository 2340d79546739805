"""What ``set verify`` compares: a table's messages in the table's current form, and differences
said in decoded values.

A message written before a DDL carries the table's older layout (a column added since is not in it,
a dropped one still is, a renamed one under its old name; Avro: another schema id). Compared as bytes
with the source rows encoded now, every untouched row would differ. :class:`CurrentForm` brings each
message to the current layout first, as a consumer reading with the current schema does: Avro by
the registry's schema resolution (the writer's schema, by its id, read as the current one: an added
column takes its default, a dropped one goes, a renamed one is found by its alias), JSON by the same
rules on the parsed row. Equal bytes then mean equal values. :func:`describe` says a difference in
values: the key and the columns that differ, decoded.
"""

import io
import json
import struct
from typing import Any

import fastavro

from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter, envelope_row_schema, key_schema
from pgshovel2.codec.rows import encode_json
from pgshovel2.consumer.connectjson import is_connect
from pgshovel2.sinks.registry import SchemaRegistry
from pgshovel2.wire import raw_schema


def value_writer(envelope: Any) -> AvroWriter | None:
    """The writer of the envelope's message values (None: JSON): the row schema's for the row
    envelope, the event schema's for the debezium envelope."""
    writer = getattr(envelope, "value_writer", None)
    return writer if writer is not None else getattr(envelope.encoder, "value_writer", None)


class CurrentForm:
    """Messages of one table in its current form (module docstring).

    table: the table's current layout; envelope: its envelope (whose writer is the current schema);
    registry: where older schemas are fetched by id (None: JSON sets). Raises RelayError (from the
    registry) when an older schema cannot be fetched.
    """

    def __init__(self, table: Table, envelope: Any, registry: SchemaRegistry | None):
        self.table, self.envelope, self._registry = table, envelope, registry
        self._writer = value_writer(envelope)
        self._current = fastavro.parse_schema(raw_schema(self._writer.schema)) if self._writer else None
        self._older: dict[bytes, Any] = {}  # schema id bytes -> that schema, parsed raw
        self._names = [c.name for c in table.columns]

    def value(self, value: bytes | None) -> bytes | None:
        """An Avro message value in the current schema (resolved from its writer's); JSON values and
        values already in the current schema as they are."""
        if value is None or self._writer is None or value[1:5] == self._writer.header[1:5]:
            return value
        datum = fastavro.schemaless_reader(io.BytesIO(value[5:]), self._old(value[1:5]), self._current)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._current, datum)
        return self._writer.header + buf.getvalue()

    def _old(self, schema_id: bytes) -> Any:
        parsed = self._older.get(schema_id)
        if parsed is None:
            schema = self._registry.schema(struct.unpack(">I", schema_id)[0])
            parsed = self._older[schema_id] = fastavro.parse_schema(raw_schema(schema))
        return parsed

    def image(self, image: bytes | None) -> bytes | None:
        """A JSON row image with the current columns in their order: a column the row does not
        have takes its default (Column.default: what PostgreSQL gave the rows that existed when it
        was added) or null, a renamed one its value under a former name, a dropped one goes. Avro
        images (already resolved by :meth:`value`) and JSON images of the current layout as they are."""
        if image is None or self._writer is not None:
            return image
        datum = json.loads(image)
        if list(datum) == self._names:
            return image
        out = {}
        for col in self.table.columns:
            name = next((n for n in (col.name, *reversed(col.aliases)) if n in datum), None)
            out[col.name] = datum[name] if name is not None else col.default
        return encode_json(out)

    def row(self, image: bytes | None) -> dict | None:
        """A row image decoded (column -> value, as the encoding reads), None where it cannot be."""
        if image is None:
            return None
        try:
            if self._writer is None:
                return json.loads(image)
            schema = self._writer.schema
            if image.startswith(self._writer.header):  # the row envelope's image is the whole value
                return fastavro.schemaless_reader(io.BytesIO(image[5:]), fastavro.parse_schema(raw_schema(schema)))
            row = fastavro.parse_schema(raw_schema(envelope_row_schema(schema)))
            return fastavro.schemaless_reader(io.BytesIO(image), row)
        except (ValueError, KeyError, TypeError, StopIteration, EOFError, IndexError):
            return None

    def key(self, key: bytes) -> str:
        """A message key, readable: JSON as its text, Avro decoded by the key fields (its bytes
        when they do not decode)."""
        try:
            if self._writer is None:
                datum = json.loads(key)
                return json.dumps(datum["payload"] if is_connect(datum) else datum, ensure_ascii=False)
            parsed = fastavro.parse_schema(raw_schema(key_schema("", self.table)))
            return json.dumps(fastavro.schemaless_reader(io.BytesIO(key[5:]), parsed), default=str, ensure_ascii=False)
        except (ValueError, KeyError, TypeError, StopIteration, EOFError, IndexError, AttributeError):
            return repr(key)


def describe(form: CurrentForm, key: bytes, source: bytes | None, kafka: bytes | None) -> str:
    """A difference of one key: the key decoded and, where both rows decode, the columns that
    differ with both values; else which side has no row."""
    where = f"key {form.key(key)}"
    if source is None or kafka is None:
        return f"{where}: {'not in the source' if source is None else 'not in kafka'}"
    a, b = form.row(source), form.row(kafka)
    if a is None or b is None:
        return f"{where}: source {source!r:.120} != kafka {kafka!r:.120}"
    columns = [c for c in a.keys() | b.keys() if a.get(c) != b.get(c)]
    said = "; ".join(f"{c}: source {a.get(c)!r:.60}, kafka {b.get(c)!r:.60}" for c in sorted(columns))
    return f"{where}: {said or 'same values, different bytes'}"
