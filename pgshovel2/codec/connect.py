"""Kafka Connect schemas and values of Debezium 3.4's PostgreSQL connector with its default modes.

The JSON form of ``envelope: debezium`` with ``debezium: {schemas: true}`` (the default): what
Kafka Connect's ``JsonConverter`` (``schemas.enable=true``) writes of Debezium's events, a
``{"schema": <Connect schema>, "payload": <value>}`` object for key and value (docs/wire.rst,
"Envelope debezium"). Column values take Debezium's forms for ``decimal.handling.mode=precise``,
``time.precision.mode=adaptive`` (at the default precision 6), ``interval.handling.mode=numeric``
and ``binary.handling.mode=bytes``.

Input values are the capture trigger's forms (:mod:`pgshovel2.codec.types`). Schemas are built once
per table layout (:func:`table_schemas`) and kept as JSON bytes; only payloads are built per message.
"""

import base64
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import connect_modes, dbztypes, temporal
from pgshovel2.codec.connect_modes import Modes
from pgshovel2.codec.pgarray import from_capture
from pgshovel2.codec.rows import RowEncoder, encode_json
from pgshovel2.codec.types import _EXACT, _money, field_type
from pgshovel2.errors import EncodeError

Convert = Callable[[Any], Any]
# Debezium's MicroDuration: a month is 365.25 / 12 = 30.4375 days (exactly 2 629 800 s)
US_PER_MONTH = 2_629_800_000_000
US_PER_DAY = 86_400_000_000
ENVELOPE_VERSION = 2  # Debezium 3.x's Envelope schema version
# What Debezium writes for ±infinity (PgJDBC's sentinels as it converts them; recorded by
# tests/integration/test_debezium_contrast.py): Date days, MicroTimestamp µs
DATE_INFINITY, DATE_MINUS_INFINITY = -2147472692, -2147472691
MICROS_INFINITY, MICROS_MINUS_INFINITY = 9223372036825200000, -9223372036832400000


@dataclass(frozen=True)
class ConnectType:
    """How one column travels in Connect form: schema (a Connect JSON schema without ``optional``
    and ``field``) and to_value (trigger form -> payload value; None: identity)."""

    schema: dict[str, Any]
    to_value: Convert | None


def _named(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "name": name, "version": 1, **extra}


def java_bytes(unscaled: int) -> bytes:
    """Java's BigInteger.toByteArray(): the minimal big-endian two's complement bytes."""
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return unscaled.to_bytes(length, "big", signed=True)


def _parse_decimal(text: str) -> Decimal | None:
    """A numeric's text as a Decimal; None for NaN/±Infinity (precise mode cannot hold them)."""
    try:
        d = Decimal(text)
    except InvalidOperation as exc:
        raise EncodeError(f"cannot parse numeric {text!r}") from exc
    return d if d.is_finite() else None


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _identity(b: bytes) -> bytes:
    return b


def _decimal(scale: int, raw: bool = False) -> Convert:
    out = _identity if raw else _b64

    def convert(text: str) -> str | bytes | None:
        d = _parse_decimal(text)
        if d is None:
            return None
        return out(java_bytes(int(d.scaleb(scale, _EXACT))))
    return convert


def _variable_decimal(raw: bool) -> Convert:
    """An unconstrained numeric -> VariableScaleDecimal {scale, value (bytes raw, else base64)}, the
    fraction's trailing zeros dropped as Debezium drops them ("1.50": scale 1, "100.00": scale 0)."""
    out = _identity if raw else _b64

    def convert(text: str) -> dict[str, Any] | None:
        d = _parse_decimal(text)
        if d is None:
            return None
        scale = max(0, -d.normalize().as_tuple().exponent) if d else 0
        return {"scale": scale, "value": out(java_bytes(int(d.scaleb(scale, _EXACT))))}
    return convert


_VARIABLE_SCALE = {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "scale"},
                                                {"type": "bytes", "optional": False, "field": "value"}],
                   "name": "io.debezium.data.VariableScaleDecimal", "version": 1, "doc": "Variable scaled decimal"}


def interval_micros(v: list) -> int:
    """Trigger interval [months, days, µs] -> Debezium's MicroDuration (µs, a month 30.4375 days)."""
    months, days, us = v
    return months * US_PER_MONTH + days * US_PER_DAY + us


_OFFSET = re.compile(r"([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$")


def timetz_utc(text: str) -> str:
    """PostgreSQL timetz text ("12:34:56.5+03") -> Debezium's ZonedTime, the time in UTC with the
    fraction digits it needs (none for whole seconds) and ``Z`` ("09:34:56.5Z", "01:30:00Z")."""
    m = _OFFSET.search(text)
    if m is None:
        raise EncodeError(f"cannot parse timetz {text!r}")
    sign = 1 if m.group(1) == "+" else -1
    offset = sign * (int(m.group(2)) * 3600 + int(m.group(3) or 0) * 60 + int(m.group(4) or 0))
    us = (temporal.time_from_text(text[:m.start()]) - offset * 1_000_000) % US_PER_DAY
    whole, fraction = temporal.time_to_json(us).split(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


_TYPMOD = re.compile(r"\((\d+)(?:,\s*(\d+))?\)")


def _typmod(col: Column) -> tuple[int | None, int | None]:
    """The (first, second) type modifiers written in the column's type ("time(3)": (3, None),
    "numeric(5,2)[]": (5, 2)), or (None, None)."""
    m = _TYPMOD.search(col.pg_type)
    if m is None:
        return None, None
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2))


def _numeric(col: Column) -> tuple[int | None, int | None]:
    """(precision, scale) of a numeric column or array element; (None, None) unconstrained."""
    if col.precision is not None:
        return col.precision, col.scale
    precision, scale = _typmod(col)
    return precision, (scale or 0) if precision is not None else None


def _date(v: int) -> int:
    """Trigger date -> Debezium's Date days (±infinity: Debezium's sentinels)."""
    if v == temporal.INT32_MAX:
        return DATE_INFINITY
    return DATE_MINUS_INFINITY if v == temporal.INT32_MIN else temporal.date_to_avro(v)


def _micro_timestamp(v: int) -> int:
    """Trigger timestamp -> Debezium's MicroTimestamp µs (±infinity: Debezium's sentinels)."""
    if v == temporal.INT64_MAX:
        return MICROS_INFINITY
    return MICROS_MINUS_INFINITY if v == temporal.INT64_MIN else temporal.timestamp_to_avro(v)


def _millis(convert: Convert | None) -> Convert:
    """A µs converter -> ms (Debezium's adaptive mode at precision <= 3); int64 limits kept."""
    def to_ms(v: int) -> int:
        us = convert(v) if convert is not None else v
        return us if us in (temporal.INT64_MIN, temporal.INT64_MAX) else us // 1000
    return to_ms


def _float(v: float | str) -> float:
    return float(v) if isinstance(v, str) else v


def _bytea(v: str) -> str:
    return base64.b64encode(bytes.fromhex(v)).decode("ascii")


def _scalar(col: Column, raw: bool = False, modes: Modes = connect_modes.DEFAULT) -> ConnectType:
    kind = col.kind
    if kind in ("numeric", "money") and modes.decimal != "precise":
        return ConnectType(*connect_modes.decimal(kind, modes.decimal, raw))
    if kind == "interval" and modes.interval == "string":
        return ConnectType(_named("string", "io.debezium.time.Interval"), connect_modes.interval_text)
    if kind == "bytea" and modes.binary != "bytes":
        return ConnectType({"type": "string"}, connect_modes.binary(modes.binary))
    simple = {"bool": "boolean", "int2": "int16", "int4": "int32", "int8": "int64", "oid": "int64",
              "float4": "float", "float8": "double"}  # JsonConverter's names of FLOAT32, FLOAT64
    if kind in simple:  # Avro floats hold NaN/±Infinity, the trigger's strings for them
        return ConnectType({"type": simple[kind]}, _float if raw and kind in ("float4", "float8") else None)
    if kind == "numeric":
        precision, scale = _numeric(col)
        if precision is not None and 0 <= scale <= precision:
            return ConnectType(_named("bytes", "org.apache.kafka.connect.data.Decimal", parameters={
                "scale": str(scale), "connect.decimal.precision": str(precision)}), _decimal(scale, raw))
        return ConnectType(dict(_VARIABLE_SCALE), _variable_decimal(raw))
    if kind == "money":
        to_decimal = _decimal(2, raw)
        return ConnectType(_named("bytes", "org.apache.kafka.connect.data.Decimal", parameters={"scale": "2"}),
                           lambda v: to_decimal(_money(v)))
    if kind == "bytea":
        return ConnectType({"type": "bytes"}, bytes.fromhex if raw else _bytea)
    if kind == "date":
        return ConnectType(_named("int32", "io.debezium.time.Date"), _date)
    if kind in ("time", "timestamp"):
        return _adaptive(col)
    if kind == "timestamptz":
        return ConnectType(_named("string", "io.debezium.time.ZonedTimestamp"),
                           lambda v: temporal.timestamp_to_json(v, True))
    if kind == "timetz":
        return ConnectType(_named("string", "io.debezium.time.ZonedTime"), timetz_utc)
    if kind == "interval":
        return ConnectType(_named("int64", "io.debezium.time.MicroDuration"), interval_micros)
    semantic = {"json": "io.debezium.data.Json", "jsonb": "io.debezium.data.Json", "uuid": "io.debezium.data.Uuid",
                "xml": "io.debezium.data.Xml", "ltree": "io.debezium.data.Ltree"}
    if kind in semantic:
        return ConnectType(_named("string", semantic[kind]), None)
    return _other(col, raw)


def _adaptive(col: Column) -> ConnectType:
    """time / timestamp in time.precision.mode=adaptive: milliseconds (io.debezium.time.Time, an
    int32, and Timestamp) up to precision 3, else microseconds (MicroTime, MicroTimestamp)."""
    precision = _typmod(col)[0]
    to_us = temporal.timestamp_to_avro if col.kind == "timestamp" else None
    if precision is not None and precision <= 3:
        if col.kind == "time":
            return ConnectType(_named("int32", "io.debezium.time.Time"), _millis(None))
        return ConnectType(_named("int64", "io.debezium.time.Timestamp"), _millis(to_us))
    if col.kind == "time":
        return ConnectType(_named("int64", "io.debezium.time.MicroTime"), None)
    return ConnectType(_named("int64", "io.debezium.time.MicroTimestamp"), _micro_timestamp)


def _other(col: Column, raw: bool) -> ConnectType:
    """bit strings, point and hstore in Debezium's forms (pgshovel2.codec.dbztypes; raw: BYTES as
    bytes, for Avro); any other type as its text, as Debezium writes the types it has no form for."""
    kind = col.kind
    if kind == "bit" and _typmod(col)[0] == 1:
        return ConnectType({"type": "boolean"}, dbztypes.bit_boolean)
    if kind in ("bit", "varbit"):
        length = _typmod(col)[0]
        params = {"parameters": {"length": str(length)}} if length is not None else {}
        to_bits = dbztypes.bits_raw if raw else dbztypes.bits
        return ConnectType(_named("bytes", "io.debezium.data.Bits", **params), to_bits)
    if kind == "point":
        return ConnectType(dict(dbztypes.POINT_SCHEMA), dbztypes.point_raw if raw else dbztypes.point)
    if kind == "hstore":
        return ConnectType(_named("string", "io.debezium.data.Json"), dbztypes.hstore_json)
    return ConnectType({"type": "string"}, None)


def flat_items(items: list, dims: int) -> list:
    """Elements nested dims deep -> one flat list in PostgreSQL's storage (row-major) order."""
    for _ in range(dims - 1):
        items = [x for sub in items for x in sub]
    return items


def _array(col: Column, raw: bool, modes: Modes) -> ConnectType:
    elem = _scalar(col, raw, modes)
    from_text = field_type(dataclasses.replace(col, is_array=False)).from_text
    convert = elem.to_value

    def convert_array(value: Any) -> list:
        # Debezium's array is one dimension with lower bound 1: a value of more dimensions goes as
        # its elements in storage order, other lower bounds are not written (docs/wire.rst)
        _, items, dims, text = from_capture(value)
        items = flat_items(items, dims)
        if text:
            items = [None if v is None else from_text(v) for v in items]
        return items if convert is None else [None if v is None else convert(v) for v in items]

    return ConnectType({"type": "array", "items": {**elem.schema, "optional": True}}, convert_array)


def connect_type(col: Column, raw: bool = False, modes: Modes = connect_modes.DEFAULT) -> ConnectType:
    """The ConnectType of a catalog column (arrays: a Connect array of optional elements).

    raw: Connect BYTES values (decimals, bytea) as bytes (for Avro), else base64 text (JSON);
    modes: the set's Debezium value modes (codec.connect_modes).
    """
    return _array(col, raw, modes) if col.is_array else _scalar(col, raw, modes)


def field_schema(schema: dict[str, Any], optional: bool, name: str) -> dict[str, Any]:
    """A struct field's Connect JSON schema in JsonConverter's key order: type, fields/items,
    optional, name, version, doc, parameters, default, field."""
    out = {k: schema[k] for k in ("type", "fields", "items") if k in schema}
    out["optional"] = optional
    out.update({k: schema[k] for k in ("name", "version", "doc", "parameters", "default") if k in schema})
    out["field"] = name
    return out


def _struct(name: str, fields: list[dict[str, Any]], optional: bool, **extra: Any) -> dict[str, Any]:
    return {"type": "struct", "fields": fields, "optional": optional, "name": name, **extra}


def _f(kind: str, optional: bool, name: str) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "field": name}


# Debezium's io.debezium.connector.postgresql.Source (version 1), then pgshovel2's position
SOURCE_FIELDS: list[dict[str, Any]] = [
    _f("string", False, "version"), _f("string", False, "connector"), _f("string", False, "name"),
    _f("int64", False, "ts_ms"),
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
     "default": "false", "field": "snapshot"},
    _f("string", False, "db"), _f("string", True, "sequence"), _f("int64", True, "ts_us"),
    _f("int64", True, "ts_ns"), _f("string", False, "schema"), _f("string", False, "table"),
    _f("int64", True, "txId"), _f("int64", True, "lsn"), _f("int64", True, "xmin"),
    _f("string", False, "position"),
]
TRANSACTION_FIELDS = [_f("string", False, "id"), _f("int64", False, "total_order"),
                      _f("int64", False, "data_collection_order")]


@dataclass(frozen=True)
class TableSchemas:
    """One table layout's Connect schemas, as JSON bytes: key (None: unkeyed table) and envelope;
    types: the columns' ConnectTypes in column order; key_types: the key columns'."""

    key: bytes | None
    envelope: bytes
    types: tuple[ConnectType, ...]


# Connect schemas whose values are what pgshovel2's Avro writes for the same column (Column.default
# is in that form): a default carries over as it is
_SAME_AS_AVRO = {None, "io.debezium.time.Date", "io.debezium.time.MicroTime", "io.debezium.time.MicroTimestamp",
                 "io.debezium.data.Uuid"}


def _column_field(col: Column, modes: Modes) -> dict[str, Any]:
    """col's field in a row struct. A column added by ALTER TABLE with a DEFAULT (Column.default:
    the value rows written before it get) has it as the field's default, as Debezium writes column
    defaults, where the Connect value is the Avro form the default is kept in; any other such
    column is optional, so that the new schema reads the older rows (a schema registry's BACKWARD
    check: a new required field without a default is refused)."""
    ct = connect_type(col, modes=modes)
    schema = ct.schema
    if col.default is not None and not col.is_array and schema["type"] != "bytes" and schema["type"] != "struct" \
            and schema.get("name") in _SAME_AS_AVRO and (ct.to_value is None or "name" in schema):
        return field_schema({**schema, "default": col.default}, col.nullable, col.name)
    return field_schema(schema, col.nullable or col.default is not None, col.name)


def row_struct(name: str, columns: tuple[Column, ...], optional: bool,
               modes: Modes = connect_modes.DEFAULT) -> dict[str, Any]:
    """The Connect struct of rows of columns (Debezium's ``<topic>.Value`` / ``<topic>.Key``)."""
    return _struct(name, [_column_field(c, modes) for c in columns], optional)


def envelope_schema(topic: str, table: Table, modes: Modes = connect_modes.DEFAULT) -> dict[str, Any]:
    """Debezium's ``<topic>.Envelope`` Connect schema of a table (version 2)."""
    value = row_struct(f"{topic}.Value", table.columns, True, modes)
    return _struct(f"{topic}.Envelope", [
        {**value, "field": "before"}, {**value, "field": "after"},
        _struct("io.debezium.connector.postgresql.Source", SOURCE_FIELDS, False, version=1, field="source"),
        _struct("event.block", TRANSACTION_FIELDS, True, version=1, field="transaction"),
        _f("string", False, "op"), _f("int64", True, "ts_ms"), _f("int64", True, "ts_us"),
        _f("int64", True, "ts_ns"),
    ], False, version=ENVELOPE_VERSION)


def table_schemas(topic: str, table: Table, raw: bool = False, modes: Modes = connect_modes.DEFAULT) -> TableSchemas:
    """The Connect schemas of a table whose events go to topic (names: ``<topic>.Key``,
    ``<topic>.Value``, ``<topic>.Envelope``, as Debezium's with topic = prefix.schema.table);
    raw: types whose BYTES values are bytes (Avro), else base64 text (JSON); modes: the set's
    Debezium value modes."""
    key = encode_json(row_struct(f"{topic}.Key", table.key_columns, False, modes)) if table.key else None
    return TableSchemas(key, encode_json(envelope_schema(topic, table, modes)),
                        tuple(connect_type(c, raw, modes) for c in table.columns))


def wrap(schema: bytes, payload: bytes) -> bytes:
    """JsonConverter's ``{"schema": ..., "payload": ...}`` of a payload already in JSON."""
    return b'{"schema":' + schema + b',"payload":' + payload + b"}"


def unwrap(message: Any) -> Any:
    """The payload of a decoded JsonConverter message with schema, else the message itself."""
    if isinstance(message, dict) and len(message) == 2 and "schema" in message and "payload" in message:
        return message["payload"]
    return message


class ConnectRowEncoder(RowEncoder):
    """A RowEncoder whose converted values are Debezium's Connect payload forms. In JSON (no
    key_writer) keys are JsonConverter messages with the key's schema (``{"schema", "payload"}``);
    in Avro (key_writer: the registered Connect-annotated key schema, codec.connect_avro; None for
    an unkeyed table with avro) keys and values are Avro datums with Avro field names.

    schemas: the table's :func:`table_schemas` (built once per table layout; raw for Avro). No
    native codec: rows are encoded in Python. Raises EncodeError naming table and column
    (RowEncoder.convert) for a value with no Connect form here.
    """

    def __init__(self, table: Table, schemas: TableSchemas, key_writer: Any = None, avro: bool = False,
                 controls: Any = None):
        super().__init__(table, avro or key_writer is not None, key_writer, None, controls)
        self._key_fits = []  # the key schema is the Connect key of Table.key_columns, values as converted
        self.schemas = schemas
        self._convs = [(i, t.to_value) for i, t in enumerate(schemas.types) if t.to_value is not None]
        self.native = None

    def native_for(self, value_schema: dict | None, value_header: bytes) -> Any:
        """None: Connect forms are written by Python only."""
        return None

    def key(self, converted: list) -> bytes | None:
        """The key message: JSON ``{"schema": <topic>.Key, "payload": {key columns}}``, Avro the key
        record; None unkeyed."""
        payload = super().key(converted)
        if self._avro or payload is None:
            return payload
        return wrap(self.schemas.key, payload)
