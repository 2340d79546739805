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
which stay the raw Avro number. bytes stay ``bytes``.

JSON: the UTF-8 JSON object as written (WIRE.md's JSON column; bytea is a
base64 string there).
"""

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro.logical_readers import LOGICAL_READERS

from pgshovel2.consumer.errors import ConsumerError

Convert = Callable[[Any], Any]
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INFINITIES = {"int-date": _INT32, "long-timestamp-micros": _INT64, "long-local-timestamp-micros": _INT64,
               "long-timestamp-millis": _INT64, "long-local-timestamp-millis": _INT64}


def _strip_logical(schema: Any) -> Any:
    """The schema without logicalType annotations (fastavro then reads raw values)."""
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical(s) for s in schema]
    return schema


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


def converter(schema: Any) -> Convert | None:
    """A function applying logical types to a raw fastavro datum of schema; None if nothing to do.

    Unions are converted when they have one non-null branch (every union
    pgshovel2 writes is ``["null", T]``); other unions are left raw.
    """
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        inner = converter(branches[0]) if len(branches) == 1 else None
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if not isinstance(schema, dict):
        return None
    kind = schema["type"]
    if not isinstance(kind, str):
        return converter(kind)
    if kind == "record":
        fields = [(f["name"], converter(f["type"])) for f in schema["fields"]]
        active = [(name, conv) for name, conv in fields if conv is not None]
        if not active:
            return None

        def record(value: dict[str, Any]) -> dict[str, Any]:
            for name, conv in active:
                value[name] = conv(value[name])
            return value
        return record
    if kind == "array":
        inner = converter(schema["items"])
        return None if inner is None else (lambda v: [inner(x) for x in v])
    logical = schema.get("logicalType")
    return _logical(schema, kind, logical) if logical else None


class Decoder:
    """Decodes keys and values to dicts (or None for null).

    registry_url: schema registry URL, needed only for Avro messages; or pass
    a ready SchemaRegistryClient as registry. Schemas are cached by id.
    raw: return Avro datums without logical types applied (the physical Avro
    values: days, microseconds, unscaled decimal bytes), as the relay's
    codec produced them.
    Raises ConsumerError naming the message when data cannot be decoded.
    """

    def __init__(self, registry_url: str | None = None, registry: SchemaRegistryClient | None = None,
                 raw: bool = False):
        self.registry_url, self.raw = registry_url, raw
        self._registry = registry
        self._schemas: dict[int, tuple[Any, Convert | None, dict[str, Any]]] = {}

    def _schema(self, schema_id: int, where: str) -> tuple[Any, Convert | None, dict[str, Any]]:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        if self._registry is None:
            if not self.registry_url:
                raise ConsumerError(f"{where} is Avro (schema id {schema_id}): pass the schema registry URL "
                                    "(--schema-registry or PGSHOVEL_SCHEMA_REGISTRY)")
            self._registry = SchemaRegistryClient({"url": self.registry_url})
        try:
            text = self._registry.get_schema(schema_id).schema_str
        except Exception as exc:  # registry errors, HTTP errors, unreachable
            raise ConsumerError(f"cannot fetch schema id {schema_id} of {where} from the schema registry "
                                f"{self.registry_url or ''}: {exc}") from exc
        writer = json.loads(text)
        cached = (fastavro.parse_schema(_strip_logical(writer)), converter(writer), writer)
        self._schemas[schema_id] = cached
        return cached

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
            return json.loads(data)
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

