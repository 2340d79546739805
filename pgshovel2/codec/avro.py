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
from pgshovel2.codec.avro_fast import compile_record
from pgshovel2.codec.types import FieldType, field_type


def _namespace(set_name: str, schema: str) -> str:
    return f"pgshovel.{names.avro_name(set_name)}.{names.avro_name(schema)}"


def _field(col: Column, ftype: FieldType, key: bool = False) -> dict[str, Any]:
    field: dict[str, Any] = {"name": names.avro_name(col.name),
                             "pgshovel.column": col.name, "pgshovel.type": col.pg_type}
    avro = ftype.key_schema if key else ftype.avro
    branches = avro if isinstance(avro, list) else [avro]  # unions cannot contain unions
    if col.nullable and col.default is None:
        field.update(type=["null", *branches], default=None)
    elif col.nullable:  # added with a DEFAULT while relayed: a union's default is its first branch's
        field.update(type=[*branches, "null"], default=col.default)
    else:
        field["type"] = avro
        if col.default is not None:  # a NOT NULL column added while relayed
            field["default"] = col.default
    if col.aliases:  # renamed while relayed: readers of the new schema still read old data
        field["aliases"] = [names.avro_name(a) for a in col.aliases]
    return field


def _define_once(schema: Any, defined: set[str]) -> Any:
    """schema with every named record after its first definition replaced by its full name
    (Avro allows one definition per name; array columns of one element type share
    their ``pgshovel.BoundedArray_*`` record)."""
    if isinstance(schema, list):
        return [_define_once(s, defined) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") == "record" and "namespace" in schema:
        full = f"{schema['namespace']}.{schema['name']}"
        if full in defined:
            return full
        defined.add(full)
        return {**schema, "fields": [{**f, "type": _define_once(f["type"], defined)} for f in schema["fields"]]}
    if schema.get("type") == "array":
        return {**schema, "items": _define_once(schema["items"], defined)}
    return schema


def value_schema(set_name: str, table: Table) -> dict[str, Any]:
    """Avro record schema of a table's after-image (captured columns)."""
    return _define_once({
        "type": "record", "name": names.avro_name(table.name),
        "namespace": _namespace(set_name, table.schema),
        "pgshovel.table": f"{table.schema}.{table.name}",
        "fields": [_field(c, field_type(c)) for c in table.columns],
    }, set())


def key_schema(set_name: str, table: Table) -> dict[str, Any] | None:
    """Avro record schema of a table's key, None for an unkeyed table: made from
    Table.key_columns (the key's own layout, kept when a DDL widened or renamed a key column)."""
    if not table.key:
        return None
    cols = table.key_columns
    return {
        "type": "record", "name": f"{names.avro_name(table.name)}_key",
        "namespace": _namespace(set_name, table.schema),
        "fields": [_field(c, field_type(c), key=True) for c in cols],
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


# The ``source`` block of the debezium envelope: the fields of Debezium 3.x's
# io.debezium.connector.postgresql.Source in its order (optional ones nullable with
# default null, snapshot defaulting to "false", as Confluent's AvroConverter writes
# them), plus pgshovel's position.
SOURCE_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Source", "namespace": "pgshovel",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": ["string", "null"], "default": "false"},
        {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None},
        {"name": "ts_us", "type": ["null", "long"], "default": None},
        {"name": "ts_ns", "type": ["null", "long"], "default": None},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None},
        {"name": "xmin", "type": ["null", "long"], "default": None},
        {"name": "position", "type": "string"},
    ],
}

# The ``transaction`` block of the debezium envelope (Debezium's event.block).
TRANSACTION_BLOCK_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "TransactionBlock", "namespace": "pgshovel",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ],
}

# The Envelope's fields after before/after (the native event writer, pgshovel2_native.DebeziumEvents,
# writes exactly these).
DEBEZIUM_TAIL_FIELDS: list[dict[str, Any]] = [
    {"name": "source", "type": SOURCE_SCHEMA},
    {"name": "transaction", "type": ["null", TRANSACTION_BLOCK_SCHEMA], "default": None},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None},
    {"name": "ts_us", "type": ["null", "long"], "default": None},
    {"name": "ts_ns", "type": ["null", "long"], "default": None},
]


def debezium_value_schema(set_name: str, table: Table) -> dict[str, Any]:
    """Avro schema of the debezium envelope of a table.

    Record ``Envelope`` in namespace ``pgshovel.{set}.{schema}.{table}``, fields in
    Debezium 3.x's order: before/after ``["null", <value_schema record>]``, source
    (:data:`SOURCE_SCHEMA`), transaction (``["null",``
    :data:`TRANSACTION_BLOCK_SCHEMA` ``]``), op, ts_ms, ts_us, ts_ns (``["null", "long"]``).
    """
    value = value_schema(set_name, table)
    value_name = f"{value['namespace']}.{value['name']}"
    return {
        "type": "record", "name": "Envelope",
        "namespace": f"{_namespace(set_name, table.schema)}.{names.avro_name(table.name)}",
        "pgshovel.table": f"{table.schema}.{table.name}",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", value_name], "default": None},
            *DEBEZIUM_TAIL_FIELDS,
        ],
    }


def envelope_row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row record (value_schema) inside a :func:`debezium_value_schema`."""
    before = next(f for f in envelope["fields"] if f["name"] == "before")
    return before["type"][1]


class AvroWriter:
    """Encodes datums of one registered schema: header + schemaless body. schema: as given."""

    def __init__(self, schema: dict[str, Any], schema_id: int):
        self.schema = schema
        self._parsed = fastavro.parse_schema(schema)
        self._header = struct.pack(">bI", 0, schema_id)
        self._fast = compile_record(schema)

    @property
    def header(self) -> bytes:
        """The 5-byte registry prefix (magic 0, schema id) of every message."""
        return self._header

    def encode(self, datum: dict[str, Any]) -> bytes:
        """Header + body of datum. Raises ValueError (naming the field, ``on field <name>``)
        when datum does not fit the schema."""
        if self._fast is not None:
            try:
                return self._header + self._fast(datum)
            except (TypeError, AttributeError, OverflowError, struct.error):
                pass  # a value of the wrong type: fastavro names the field
        buf = io.BytesIO()
        buf.write(self._header)
        fastavro.schemaless_writer(buf, self._parsed, datum)
        return buf.getvalue()
