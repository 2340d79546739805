"""Decoding of message keys and values: Avro (Confluent framing) or JSON.

Avro: magic byte 0, 4-byte big-endian schema id, Avro binary body. The
writer schema is fetched once per id from the registry
(confluent_kafka.schema_registry.SchemaRegistryClient) and the body is read
with fastavro. Logical types become Python values through fastavro's own
logical readers (date -> datetime.date, timestamp-micros -> aware UTC
datetime, local-timestamp-micros -> naive datetime, time-micros ->
datetime.time, decimal -> decimal.Decimal, uuid -> uuid.UUID), except the
±infinity sentinels of WIRE.md (int/long min/max on date and timestamps),
which become the strings ``"infinity"`` / ``"-infinity"`` as in the JSON
encoding, and finite values outside Python's datetime range (years > 9999),
which stay the raw Avro number. bytes stay ``bytes``. Debezium's Connect-annotated Avro
(envelope debezium, ``debezium.schemas``) reads the same way: decimals (``logicalType: decimal``) to
Decimal, ``io.debezium.time.Date``/``MicroTime``/``MicroTimestamp`` (by ``connect.name``) as the
date, time-micros and local-timestamp-micros logical types, VariableScaleDecimal to Decimal,
MicroDuration to the ISO 8601 duration of its µs (as from JSON); its other semantic types keep
Debezium's value (ZonedTimestamp and ZonedTime text, Json text).

JSON: the UTF-8 JSON object as written (WIRE.md's JSON column; bytea is a
base64 string there), except json/jsonb values that travelled escaped
(``{"pgshovel.json": text}``, docs/wire.rst), which become
:class:`pgshovel2.codec.jsonvalue.JsonValue` (``JsonValue("null")`` is the JSON
literal null, None is SQL NULL).

Both: arrays are (nested) lists; an array whose lower bounds are not all 1 is
``{"lower_bounds": [...], "elements": [...]}``.
"""

import io
import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import fastavro
from fastavro.logical_readers import LOGICAL_READERS

from pgshovel2 import registryconf
from pgshovel2.codec import temporal
from pgshovel2.codec.jsonvalue import ESCAPE_KEY, unescape
from pgshovel2.consumer.connectjson import ConnectReader, is_connect
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.registryconf import Registry
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, raw_schema

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

Convert = Callable[[Any], Any]
_INT32 = (INT32_MIN, INT32_MAX)
_INT64 = (INT64_MIN, INT64_MAX)
_ESCAPE = f'"{ESCAPE_KEY}"'.encode()
_INFINITIES = {"int-date": _INT32, "long-timestamp-micros": _INT64, "long-local-timestamp-micros": _INT64,
               "long-timestamp-millis": _INT64, "long-local-timestamp-millis": _INT64}


def _logical(schema: dict[str, Any], base: str, logical: str) -> Convert | None:
    name = f"{base}-{logical}"
    reader = LOGICAL_READERS.get(name)
    if reader is None:
        return None
    low, high = _INFINITIES.get(name, (None, None))

    def convert(value: Any) -> Any:
        if value == high:
            return "infinity"
        if value == low:
            return "-infinity"
        try:
            return reader(value, schema, None)
        except (OverflowError, ValueError):
            return value  # finite but outside Python's datetime range: raw Avro value
    return convert


_PRIMITIVE_NAMES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _branch_kind(schema: Any) -> str:
    """How a decoded value of a union branch is told apart: ``array`` (list), ``record``
    (dict: records and maps) or ``scalar``."""
    if isinstance(schema, str):
        return "scalar" if schema in _PRIMITIVE_NAMES else "record"  # a named type: pgshovel's are records
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "array":
        return "array"
    return "record" if kind in ("record", "map") else "scalar"


def _union(branches: list, named: dict[str, Convert | None]) -> Convert | None:
    """Converter of a union: the branch is chosen by the decoded value's Python type."""
    convs: dict[str, Convert | None] = {}
    for branch in branches:
        kind = _branch_kind(branch)
        if kind in convs:
            return None  # two branches of one kind (e.g. int and string): left raw
        convs[kind] = converter(branch, named)
    if all(c is None for c in convs.values()):
        return None

    def union(value: Any) -> Any:
        if value is None:
            return None
        kind = "array" if isinstance(value, list) else "record" if isinstance(value, dict) else "scalar"
        conv = convs.get(kind)
        return value if conv is None else conv(value)
    return union


def converter(schema: Any, named: dict[str, Convert | None] | None = None) -> Convert | None:
    """A function applying logical types to a raw fastavro datum of schema; None if nothing to do.

    Unions are converted branch by branch, the branch chosen by the decoded
    value's type (list: array, dict: record; unions with two branches of one
    such kind are left raw). named: converters of the named records defined
    so far in the schema (full name -> converter), for references by name.
    """
    named = {} if named is None else named
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            return _union(branches, named)
        inner = converter(branches[0], named)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if isinstance(schema, str):
        return named.get(schema)
    if not isinstance(schema, dict):
        return None
    connect = _connect_converter(schema, named)
    if connect is not None:
        return connect
    kind = schema["type"]
    if not isinstance(kind, str) or kind not in ("record", "array") and kind not in _PRIMITIVE_NAMES:
        return converter(kind, named)
    if kind == "record":
        fields = [(f["name"], converter(f["type"], named)) for f in schema["fields"]]
        active = [(name, conv) for name, conv in fields if conv is not None]

        def record(value: dict[str, Any]) -> dict[str, Any]:
            for name, conv in active:
                value[name] = conv(value[name])
            return value
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = record if active else None
        return record if active else None
    if kind == "array":
        inner = converter(schema["items"], named)
        return None if inner is None else (lambda v: [inner(x) for x in v])
    logical = schema.get("logicalType")
    return _logical(schema, kind, logical) if logical else None


def _variable_decimal(value: dict[str, Any]) -> Decimal:
    return Decimal(int.from_bytes(value["value"], "big", signed=True)).scaleb(-value["scale"])


# Debezium's semantic types in Connect-annotated Avro (codec.connect_avro): as the Avro logical
# type of the same value (days, µs since 1970), VariableScaleDecimal's {scale, value} as a Decimal
_CONNECT_LOGICAL = {"io.debezium.time.Date": ("int", "date"), "io.debezium.time.MicroTime": ("long", "time-micros"),
                    "io.debezium.time.MicroTimestamp": ("long", "local-timestamp-micros")}


def _connect_converter(schema: dict[str, Any], named: dict[str, Convert | None]) -> Convert | None:
    """Converter of a Debezium semantic type by its ``connect.name`` (None: not one of them)."""
    name = schema.get("connect.name")
    if name in _CONNECT_LOGICAL:
        return _logical(schema, *_CONNECT_LOGICAL[name])
    if name == "io.debezium.time.MicroDuration":  # as the JSON form reads (connectjson): ISO 8601 of its µs
        return lambda v: temporal.interval_to_iso([0, 0, v])
    if name == "io.debezium.data.VariableScaleDecimal":
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = _variable_decimal
        return _variable_decimal
    return None


def _unescape_columns(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON row (or Debezium event) with the json escapes of its column values replaced by
    JsonValue (pgshovel2.codec.jsonvalue)."""
    if "op" in row and "source" in row and ("before" in row or "after" in row):  # debezium envelope
        for image in ("before", "after"):
            if isinstance(row.get(image), dict):
                _unescape_columns(row[image])
        return row
    for name, value in row.items():
        row[name] = unescape(value)
    return row


class Decoder:
    """Decodes keys and values to dicts (or None for null).

    registry_url: the schema registry, needed only for Avro messages: its settings
    (pgshovel2.registryconf.RegistrySettings: basic auth, TLS) or its URL, completed from this
    process's PGSHOVEL_SCHEMA_REGISTRY_* variables when first needed; or pass a ready
    SchemaRegistryClient as registry. Schemas are cached by id.
    raw: return Avro datums without logical types applied (the physical Avro
    values: days, microseconds, unscaled decimal bytes), as the relay's
    codec produced them.
    JSON with Kafka Connect schemas (``{"schema", "payload"}``: the debezium envelope's default)
    decodes to its payload in pgshovel2's JSON forms (pgshovel2.consumer.connectjson).
    Raises ConsumerError naming the message when data cannot be decoded.
    """

    def __init__(self, registry_url: Registry | None = None, registry: "SchemaRegistryClient | None" = None,
                 raw: bool = False):
        self.registry_url, self.raw = registry_url, raw
        self._registry = registry
        self._schemas: dict[int, tuple[Any, Convert | None, dict[str, Any]]] = {}
        self._connect = ConnectReader()

    def _schema(self, schema_id: int, where: str) -> tuple[Any, Convert | None, dict[str, Any]]:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        if self._registry is None:
            if not self.registry_url:
                raise ConsumerError(f"{where} is Avro (schema id {schema_id}): pass the schema registry URL "
                                    "(--schema-registry or PGSHOVEL_SCHEMA_REGISTRY)")
            settings = registryconf.settings(self.registry_url)
            self.registry_url = settings  # the URL string resolved once
            self._registry = settings.client()  # ~0.3 s to import: only for Avro
        try:
            text = self._registry.get_schema(schema_id).schema_str
        except Exception as exc:  # registry errors, HTTP errors, unreachable
            raise ConsumerError(f"cannot fetch schema id {schema_id} of {where} from the schema registry "
                                f"{self.registry_url or ''}: {registryconf.failure(exc, self.registry_url)}") from exc
        writer = json.loads(text)
        cached = (fastavro.parse_schema(raw_schema(writer)), converter(writer), writer)
        self._schemas[schema_id] = cached
        return cached

    def writer_schema(self, schema_id: int, where: str) -> dict[str, Any]:
        """The registered JSON schema of schema_id (cached). Raises ConsumerError naming where."""
        return self._schema(schema_id, where)[2]

    def decode(self, data: bytes | None, where: str) -> dict[str, Any] | None:
        """Decode one key or value; where names it in errors (topic, partition, offset, key/value)."""
        if data is None:
            return None
        try:
            if data[:1] == b"\x00":
                if len(data) < 5:
                    raise ValueError(f"{len(data)} bytes, shorter than the 5-byte Confluent header")
                _, schema_id = struct.unpack(">bI", data[:5])
                parsed, convert, _ = self._schema(schema_id, where)
                body = io.BytesIO(data)
                body.seek(5)
                datum = fastavro.schemaless_reader(body, parsed)
                return convert(datum) if convert is not None and not self.raw else datum
            datum = json.loads(data)
            if is_connect(datum):  # Connect's JsonConverter with schemas (envelope debezium)
                return self._connect.read(datum, data)
            if _ESCAPE in data and isinstance(datum, dict):
                return _unescape_columns(datum)
            return datum
        except ConsumerError:
            raise
        except Exception as exc:  # any decoding failure (fastavro, json, utf-8) names the message
            raise ConsumerError(f"cannot decode {where}: {exc}") from exc

    def avro(self, data: bytes, where: str) -> tuple[int, dict[str, Any], Any]:
        """(schema id, writer schema, raw datum) of an Avro message (first byte 0).

        The datum is read without logical types (as with raw=True); the writer
        schema is the registered JSON schema, with its field properties
        (``pgshovel.column``, ``pgshovel.type``). Raises ConsumerError naming
        where.
        """
        try:
            if len(data) < 5 or data[:1] != b"\x00":
                raise ValueError("not an Avro message (Confluent header: magic byte 0, 4-byte schema id)")
            _, schema_id = struct.unpack(">bI", data[:5])
            parsed, _, writer = self._schema(schema_id, where)
            body = io.BytesIO(data)
            body.seek(5)
            return schema_id, writer, fastavro.schemaless_reader(body, parsed)
        except ConsumerError:
            raise
        except Exception as exc:  # fastavro and header failures name the message
            raise ConsumerError(f"cannot decode {where}: {exc}") from exc

