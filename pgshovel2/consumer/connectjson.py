"""Kafka Connect JsonConverter messages (``{"schema", "payload"}``, the debezium envelope's JSON with
``debezium: {schemas: true}``) read back to pgshovel2's JSON datums.

The consumer library hands out JSON messages in pgshovel2's JSON value forms (docs/wire.rst, type
mapping); this module turns the Connect forms Debezium's defaults use back into them, by the
semantic name of each field's schema: decimals to exact numeric text, ``io.debezium.time.Date``
days to ``"YYYY-MM-DD"``, ``MicroTime``/``MicroTimestamp`` to ISO text, ``MicroDuration`` to an
ISO 8601 duration of its µs (Debezium's form keeps no months or days: docs/wire.rst), json strings
to embedded JSON values. Unnamed values (strings, numbers, base64 bytes) are the same in both.
"""

import base64
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pgshovel2.codec import jsonvalue, temporal
from pgshovel2.codec.connect import DATE_INFINITY, DATE_MINUS_INFINITY, MICROS_INFINITY, MICROS_MINUS_INFINITY
from pgshovel2.codec.temporal import DAYS_2000, MICROS_2000
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

Convert = Callable[[Any], Any]


def is_connect(datum: Any) -> bool:
    """True for a decoded JsonConverter message with schema: exactly ``schema`` and ``payload``."""
    return isinstance(datum, dict) and len(datum) == 2 and "schema" in datum and "payload" in datum


def _unscaled(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


def decimal_text(unscaled: int, scale: int) -> str:
    """Exact numeric text of unscaled × 10^-scale, never in exponent form ("1.5000")."""
    return format(Decimal(f"{unscaled}E{-scale}"), "f")  # exact: no context rounds it


def _date(days: int) -> str:
    if days in (DATE_INFINITY, DATE_MINUS_INFINITY):  # Debezium's sentinels (codec/connect.py)
        return "infinity" if days == DATE_INFINITY else "-infinity"
    return temporal.date_to_json(days if days in (INT32_MIN, INT32_MAX) else days - DAYS_2000)


def _timestamp(us: int) -> str:
    if us in (MICROS_INFINITY, MICROS_MINUS_INFINITY):
        return "infinity" if us == MICROS_INFINITY else "-infinity"
    return temporal.timestamp_to_json(us if us in (INT64_MIN, INT64_MAX) else us - MICROS_2000, False)


def _decimal(schema: dict[str, Any]) -> Convert:
    scale = int(schema.get("parameters", {}).get("scale", 0))
    return lambda v: decimal_text(_unscaled(v), scale)


def _bits(v: str) -> str:
    """Debezium's Bits (BitSet.toByteArray, base64) -> the bit string without leading zeros (Debezium's
    form keeps none: docs/wire.rst)."""
    value = int.from_bytes(base64.b64decode(v), "little")
    return format(value, "b") if value else ""


def _float_text(v: float) -> str:
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def _point(v: dict[str, Any]) -> str:
    return f"({_float_text(v['x'])},{_float_text(v['y'])})"


_NAMED: dict[str, Callable[[dict[str, Any]], Convert]] = {
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.data.VariableScaleDecimal": lambda _: lambda v: decimal_text(_unscaled(v["value"]), v["scale"]),
    "io.debezium.time.Date": lambda _: _date,
    "io.debezium.time.MicroTime": lambda _: temporal.time_to_json,
    "io.debezium.time.MicroTimestamp": lambda _: _timestamp,
    "io.debezium.time.Time": lambda _: lambda v: temporal.time_to_json(v * 1000),
    "io.debezium.time.Timestamp": lambda _: lambda v: _timestamp(v if v in (INT64_MIN, INT64_MAX) else v * 1000),
    "io.debezium.data.Bits": lambda _: _bits,
    "io.debezium.data.geometry.Point": lambda _: _point,
    "io.debezium.time.MicroDuration": lambda _: lambda v: temporal.interval_to_iso([0, 0, v]),
}


def _json(element: bool, escapes: bool) -> Convert:
    """json text -> the JSON encoding's value (jsonvalue.embed); escapes: keep escape objects as
    they are (else JsonValue, as Decoder gives them)."""
    if escapes:
        return lambda v: jsonvalue.embed(v, element=element)
    return lambda v: jsonvalue.unescape(jsonvalue.embed(v, element=element))


def _value(schema: dict[str, Any], escapes: bool, element: bool = False) -> Convert | None:
    """The converter of one field's values (None: identity)."""
    if schema.get("name") == "io.debezium.data.Json":
        return _json(element, escapes)
    named = _NAMED.get(schema.get("name", ""))
    if named is not None:
        return named(schema)
    if schema.get("type") == "array":
        item = _value(schema["items"], escapes, element=True)
        if item is None:
            return None
        return lambda vs: [None if v is None else item(v) for v in vs]
    return None


def row_reader(schema: dict[str, Any], escapes: bool = False) -> Convert:
    """Converter of a row struct's payload (``<topic>.Value`` / ``<topic>.Key``) to pgshovel2's forms
    (escapes: json values' escape objects kept, as in a JSON message; else JsonValue)."""
    convs = [(f["field"], c) for f in schema["fields"] if (c := _value(f, escapes)) is not None]

    def read(row: dict[str, Any]) -> dict[str, Any]:
        for name, conv in convs:
            if row.get(name) is not None:
                row[name] = conv(row[name])
        return row
    return read


def reader(schema: dict[str, Any], escapes: bool = False) -> Convert:
    """Converter of a payload of schema (a Debezium ``Envelope`` or a row struct)."""
    if not schema.get("name", "").endswith(".Envelope"):
        return row_reader(schema, escapes)
    images = {f["field"]: row_reader(f, escapes) for f in schema["fields"] if f["field"] in ("before", "after")}

    def read(event: dict[str, Any]) -> dict[str, Any]:
        for name, conv in images.items():
            if event.get(name) is not None:
                event[name] = conv(event[name])
        return event
    return read


class ConnectReader:
    """Reads JsonConverter messages to pgshovel2 datums, converters cached by schema text.

    escapes: json values as the JSON encoding writes them (escape objects kept: what a renderer of
    raw JSON messages expects); False: escapes read to JsonValue (as Decoder gives JSON values).
    """

    def __init__(self, escapes: bool = False) -> None:
        self._escapes = escapes
        self._cache: dict[str, Convert] = {}

    def read(self, message: dict[str, Any], data: bytes) -> Any:
        """The payload of message (is_connect, decoded from data) in pgshovel2's JSON forms."""
        if message["schema"] is None:  # a schemaless value (Connect's null key of an op t event)
            return message["payload"]
        end = data.find(b',"payload":') if data.startswith(b'{"schema":') else -1
        schema_text = data[:end].decode("utf-8") if end > 0 else json.dumps(message["schema"], sort_keys=True)
        conv = self._cache.get(schema_text)
        if conv is None:
            conv = self._cache[schema_text] = reader(message["schema"], self._escapes)
        payload = message["payload"]
        return payload if payload is None else conv(payload)


def _as_json(value: Any) -> Any:
    """A raw Avro datum of Connect values as JsonConverter's payload: bytes as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def avro_row_reader(schema: dict[str, Any], fields: dict[str, str]) -> Convert:
    """Converter of a raw Avro row datum (Decoder raw=True) of the debezium envelope's Connect Avro
    form to pgshovel2's JSON forms: schema is the row's Connect struct (codec.connect.row_struct);
    fields maps Avro field names to column names (codec.connect_avro escapes names)."""
    read = row_reader(schema)
    return lambda row: read({fields.get(k, k): _as_json(v) for k, v in row.items()})
