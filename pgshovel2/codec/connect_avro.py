"""Kafka Connect schemas as Avro, the way Confluent's AvroConverter registers them
(``AvroData.fromConnectSchema`` with ``connect.meta.data=true``): the Avro form of ``envelope:
debezium`` with ``debezium: {schemas: true}`` (docs/wire.rst, "Envelope debezium").

The Connect schemas are :mod:`pgshovel2.codec.connect`'s (one source of truth for JSON and Avro);
this module only translates them:

- struct -> record named by the Connect name (the last dot-separated part; the rest is the
  namespace), every field name and name part made a valid Avro name (:func:`names.avro_name`),
  ``"connect.name"`` (the exact Connect name), ``"connect.version"``, ``"connect.doc"`` where set;
- optional -> ``["null", T]`` with default null; optional with a default -> ``[T, "null"]`` with it
  (and ``"connect.default"`` on T);
- int8/int16 -> ``"int"`` with ``"connect.type"``; int32 -> int; int64 -> long; float32/float64 ->
  float/double;
- ``org.apache.kafka.connect.data.Decimal`` -> bytes with ``logicalType: decimal``, ``precision``
  (``connect.decimal.precision``, else AvroData's default 64), ``scale`` and the Connect names;
- array -> ``{"type": "array", "items": ...}`` (Debezium's items are optional: ``["null", T]``);
- a named type defined twice (``before``/``after``, VariableScaleDecimal) is referenced by full name.
"""

from typing import Any

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.connect import ConnectRowEncoder, TableSchemas, envelope_schema, row_struct, table_schemas
from pgshovel2.codec.connect_modes import DEFAULT, Modes

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DEFAULT_PRECISION = 64  # AvroData's precision of a Decimal without connect.decimal.precision
_PRIMITIVE = {"boolean": "boolean", "int8": "int", "int16": "int", "int32": "int", "int64": "long",
              "float": "float", "float32": "float", "double": "double", "float64": "double",
              "string": "string", "bytes": "bytes"}


def _split(full: str) -> tuple[str | None, str]:
    """(namespace, name) of a Connect name, each part a valid Avro name."""
    parts = [names.avro_name(p) for p in full.split(".")]
    return (".".join(parts[:-1]) or None), parts[-1]


def _base(schema: dict[str, Any], defined: set[str]) -> Any:
    """The Avro schema of a Connect schema without its optionality."""
    kind = schema["type"]
    if kind == "struct":
        namespace, name = _split(schema.get("name") or "ConnectDefault")
        full = f"{namespace}.{name}" if namespace else name
        if full in defined:
            return full
        defined.add(full)
        out: dict[str, Any] = {"type": "record", "name": name}
        if namespace:
            out["namespace"] = namespace
        if "doc" in schema:
            out["doc"] = schema["doc"]
        out["fields"] = [avro_field(f, defined) for f in schema["fields"]]
    elif kind == "array":
        out = {"type": "array", "items": avro_schema(schema["items"], defined)}
    else:
        out = {"type": _PRIMITIVE[kind]}
        if kind in ("int8", "int16"):
            out["connect.type"] = kind
        if schema.get("name") == DECIMAL:
            params = schema.get("parameters", {})
            out["scale"] = int(params.get("scale", 0))
            out["precision"] = int(params.get("connect.decimal.precision", DEFAULT_PRECISION))
    if "doc" in schema:
        out["connect.doc"] = schema["doc"]
    if "version" in schema:
        out["connect.version"] = schema["version"]
    if "parameters" in schema:
        out["connect.parameters"] = dict(schema["parameters"])
    if "default" in schema:
        out["connect.default"] = schema["default"]
    if "name" in schema:
        out["connect.name"] = schema["name"]
    if schema.get("name") == DECIMAL:
        out["logicalType"] = "decimal"
    return out if len(out) > 1 or kind in ("struct", "array") else out["type"]


def avro_schema(schema: dict[str, Any], defined: set[str] | None = None) -> Any:
    """The Avro schema of a Connect JSON schema (optional: a union with null, null first unless
    the schema has a default). defined: full names of records already defined (shared by one
    whole schema: a name is defined once, then referenced)."""
    base = _base(schema, set() if defined is None else defined)
    if not schema.get("optional"):
        return base
    return [base, "null"] if schema.get("default") is not None else ["null", base]


def avro_field(schema: dict[str, Any], defined: set[str]) -> dict[str, Any]:
    """The Avro record field of a Connect struct field (its schema has ``field``)."""
    out: dict[str, Any] = {"name": names.avro_name(schema["field"]), "type": avro_schema(schema, defined)}
    if schema.get("default") is not None:
        out["default"] = schema["default"]
    elif schema.get("optional"):
        out["default"] = None
    return out


def key_schema(topic: str, table: Table, modes: Modes = DEFAULT) -> dict[str, Any] | None:
    """The Avro key schema (``<topic>.Key``) of a table; None for an unkeyed table."""
    if not table.key:
        return None
    return avro_schema(row_struct(f"{topic}.Key", table.key_columns, False, modes))


def value_schema(topic: str, table: Table, modes: Modes = DEFAULT) -> dict[str, Any]:
    """The Avro value schema (``<topic>.Envelope``, Debezium's Envelope version 2) of a table. A
    column renamed while relayed (Column.aliases) has its former names as the field's Avro
    ``aliases``, so a reader of this schema finds it in rows written before (Avro schema
    resolution; Connect itself has no aliases and ignores them)."""
    schema = avro_schema(envelope_schema(topic, table, modes))
    renamed = {names.avro_name(c.name): [names.avro_name(a) for a in c.aliases] for c in table.columns if c.aliases}
    if renamed:
        row = next(f for f in schema["fields"] if f["name"] == "before")["type"][1]
        for field in row["fields"]:
            if field["name"] in renamed:
                field["aliases"] = renamed[field["name"]]
    return schema


def encoder(table: Table, topic: str, key_writer: AvroWriter | None, modes: Modes = DEFAULT,
            controls: Any = None) -> ConnectRowEncoder:
    """A ConnectRowEncoder writing Avro (raw bytes for Connect BYTES) with the registered key
    writer of :func:`key_schema` (None: unkeyed); controls: the table's (codec.controls; table is
    then the controlled one)."""
    schemas: TableSchemas = table_schemas(topic, table, raw=True, modes=modes)
    return ConnectRowEncoder(table, schemas, key_writer, avro=True, controls=controls)
