"""Avro encoding in the Confluent wire format (magic 0, 4-byte schema id, body).

Schemas are built here; registering them is the sink's job (see
pgshovel2.sinks.registry), so this module does no I/O.
"""

import io
import struct
from typing import Any

import fastavro

from pgshovel2 import names
from pgshovel2.catalog import Column, Table
from pgshovel2.codec.types import FieldType, field_type


def _namespace(set_name: str, schema: str) -> str:
    return f"pgshovel.{names.avro_name(set_name)}.{names.avro_name(schema)}"


def _field(col: Column, ftype: FieldType) -> dict[str, Any]:
    field: dict[str, Any] = {"name": names.avro_name(col.name),
                             "pgshovel.column": col.name, "pgshovel.type": col.pg_type}
    if col.nullable:
        field.update(type=["null", ftype.avro], default=None)
    else:
        field["type"] = ftype.avro
    return field


def value_schema(set_name: str, table: Table) -> dict[str, Any]:
    """Avro record schema of a table's after-image (captured columns)."""
    return {
        "type": "record", "name": names.avro_name(table.name),
        "namespace": _namespace(set_name, table.schema),
        "pgshovel.table": f"{table.schema}.{table.name}",
        "fields": [_field(c, field_type(c)) for c in table.columns],
    }


def key_schema(set_name: str, table: Table) -> dict[str, Any] | None:
    """Avro record schema of a table's key, None for an unkeyed table."""
    if not table.key:
        return None
    cols = [c for c in table.columns if c.name in table.key]
    cols.sort(key=lambda c: table.key.index(c.name))
    return {
        "type": "record", "name": f"{names.avro_name(table.name)}_key",
        "namespace": _namespace(set_name, table.schema),
        "fields": [_field(c, field_type(c)) for c in cols],
    }


TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Transaction", "namespace": "pgshovel",
    "fields": [
        {"name": "type", "type": "string"},
        {"name": "txid", "type": "long"},
        {"name": "position", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "event_count", "type": ["null", "long"], "default": None},
        {"name": "data_collections", "default": None, "type": ["null", {
            "type": "array", "items": {
                "type": "record", "name": "DataCollection",
                "fields": [{"name": "data_collection", "type": "string"},
                           {"name": "event_count", "type": "long"}]}}]},
        {"name": "table", "type": ["null", "string"], "default": None},
    ],
}


class AvroWriter:
    """Encodes datums of one registered schema: header + schemaless body."""

    def __init__(self, schema: dict[str, Any], schema_id: int):
        self._parsed = fastavro.parse_schema(schema)
        self._header = struct.pack(">bI", 0, schema_id)

    def encode(self, datum: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        fastavro.schemaless_writer(buf, self._parsed, datum)
        return buf.getvalue()
