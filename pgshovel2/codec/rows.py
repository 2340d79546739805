"""Row encoders: a captured row (trigger form, list in column order) -> key and value bytes."""

import json
import re
from collections.abc import Callable
from typing import Any

from pgshovel2 import names
from pgshovel2.catalog import Column, Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.avro_fast import write_long as _avro_long
from pgshovel2.codec.avro_fast import write_string as _avro_string
from pgshovel2.codec.controls import ColumnControls
from pgshovel2.codec.native import row_codec
from pgshovel2.codec.types import field_type
from pgshovel2.errors import EncodeError, KeyLayoutError

Converters = list[tuple[int, Callable[[Any], Any]]]

# Older capture code wrote a float's negative zero as the JSON number -0 (now -0.0), which
# json.loads reads as the integer 0; no other form writes the number token -0.
_ON_FIELD = re.compile(r"on field (\S+)$")
_MINUS_ZERO = re.compile(r"[\[,:]-0[,\]}]")


def _int_or_minus_zero(token: str) -> int | float:
    return -0.0 if token == "-0" else int(token)


def loads_row(text: str | bytes) -> Any:
    """A captured row (trigger-form JSON text) as Python values: json.loads, except that the
    number -0 (float negative zero, as rows queued by older capture code have it) stays -0.0."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if "-0" in text and _MINUS_ZERO.search(text):
        return json.loads(text, parse_int=_int_or_minus_zero)
    return json.loads(text)


def as_values(row: Any) -> Any:
    """A captured row as a list of trigger-form values: sources hand rows on as their JSON text
    (str or bytes) for the native codec to read, which :func:`loads_row` reads here; a list (a
    snapshot row) or None is returned as is."""
    return loads_row(row) if isinstance(row, str | bytes) else row


_INT32 = (-(2**31), 2**31 - 1)


def key_fit(col: Column) -> Callable[[Any], bool] | None:
    """A check that a converted value fits col's field in a key schema made from col (a key column
    as Table.key_layout keeps it), None when every value of a widened column does: Avro ``int``
    (smallint, integer) takes 32 bits; a decimal(p, s) at most p digits (its bytes are the unscaled
    value, two's complement)."""
    if col.is_array:
        return None
    if col.kind in ("int2", "int4"):
        return lambda v: _INT32[0] <= v <= _INT32[1]
    if col.kind == "numeric" and col.precision is not None:
        bound = 10 ** col.precision
        return lambda v: abs(int.from_bytes(v, "big", signed=True)) < bound
    return None


class RowEncoder:
    """Encodes rows of one table in one encoding.

    Rows are lists of trigger-form values in the order of ``table.columns``.
    ``key(row)`` is None for an unkeyed table. Raises EncodeError naming the
    table and column for a value the encoding cannot represent.

    controls: the table's column controls (codec.controls), applied to every row :meth:`convert`
    is given; table is then the controlled table (controls.table), and there is no native codec
    (it would read the rows as captured).
    """

    def __init__(self, table: Table, avro: bool, key_writer: AvroWriter | None = None,
                 value_writer: AvroWriter | None = None, controls: ColumnControls | None = None):
        self.controls = controls
        self.table = table
        types = [field_type(c) for c in table.columns]
        attr = "to_avro" if avro else "to_json"
        self._convs: Converters = [(i, getattr(t, attr)) for i, t in enumerate(types)
                                   if getattr(t, attr) is not None]
        field_names = [names.avro_name(c.name) if avro else c.name for c in table.columns]
        self._names = field_names
        positions = {c.attnum: i for i, c in enumerate(table.columns)}
        key_columns = table.key_columns if table.key else ()
        self._key_idx = [positions[c.attnum] for c in key_columns]
        # the key's own fields (Table.key_layout: names and types as its schema was made), checked to fit
        self._key_names = [names.avro_name(c.name) if avro else c.name for c in key_columns]
        self._key_types = [field_type(c) for c in key_columns]
        self._key_fits = [(i, c, fits) for i, c in zip(self._key_idx, key_columns, strict=True)
                          if (fits := key_fit(c)) is not None] if avro and table.key_layout is not None else []
        self._avro = avro
        self._key_writer, self._value_writer = key_writer, value_writer
        self._types = types
        self.native = self.native_for(value_writer.schema, value_writer.header) if value_writer else \
            self.native_for(None, b"") if not avro else None

    def native_for(self, value_schema: dict | None, value_header: bytes) -> Any:
        """A native codec (pgshovel2_native.RowCodec, or None: see codec/native.py) of this table's keys
        and of values of value_schema (Avro: a record of this table's value fields; None with JSON)
        prefixed with value_header."""
        if self._key_fits or self.table.key_layout is not None or self.controls is not None:
            return None  # a key kept in an older layout (Python checks that each value fits it); controls
        key = (self._key_writer.schema, self._key_writer.header) if self._key_writer else None
        value = (value_schema, value_header) if value_schema is not None else None
        return row_codec(self._types, self._names, [c.name for c in self.table.columns], self._key_idx,
                         self._avro, key, value)

    def encode_native(self, row: Any, with_value: bool = True) -> tuple[bytes | None, bytes | None] | None:
        """(key, value) bytes of a row (JSON text or trigger-form list) by the native codec: equal to
        key(convert(row)) and value(convert(row)) (value None unless with_value); None when the
        native codec is off or leaves this row to Python (encode it with convert/key/value)."""
        return None if self.native is None else self.native.encode(row, with_value)

    def convert(self, row: list) -> list:
        """Apply the column converters to a row (copy; SQL NULL stays None). Raises EncodeError
        naming table, column and type for a value that cannot be converted."""
        out = list(row) if self.controls is None else self.controls.apply(row)
        for i, conv in self._convs:
            v = out[i]
            if v is not None:
                try:
                    out[i] = conv(v)
                except Exception as exc:  # a value no converter expected (a bug): name it, stop
                    col = self.table.columns[i]
                    raise EncodeError(f"table {self.table.qualified}, column "
                                      f"{names.quote_ident(col.name)} ({col.pg_type}): {exc}") from exc
        return out

    def key(self, converted: list) -> bytes | None:
        """Key bytes of a converted row, None for an unkeyed table (arrays' lower bounds are
        not part of keys: FieldType.key)."""
        if not self._key_idx:
            return None
        for i, col, fits in self._key_fits:
            if converted[i] is not None and not fits(converted[i]):
                raise KeyLayoutError(self.table.qualified, col.name, converted[i], (
                    f"table {self.table.qualified}: key column {names.quote_ident(col.name)} holds a value that "
                    f"does not fit the key's schema, kept as {col.pg_type} since a DDL widened the column (every "
                    "key's bytes stay the same)"))
        datum = {n: t.key(converted[i]) for n, i, t in zip(self._key_names, self._key_idx, self._key_types,
                                                              strict=True)}
        return self._encode(datum, self._key_writer)

    def value_datum(self, converted: list) -> dict[str, Any]:
        """The row as a datum: {field name: converted value} in column order.

        Field names are the escaped Avro names with Avro, the column names with JSON.
        """
        return dict(zip(self._names, converted, strict=True))

    @property
    def value_writer(self) -> AvroWriter | None:
        """The value schema's writer (None: JSON)."""
        return self._value_writer

    def fields_of(self, columns: list[str]) -> list[str]:
        """The value field names of columns (exact names of the table's columns); KeyError for another name."""
        by_column = {c.name: n for c, n in zip(self.table.columns, self._names, strict=True)}
        return [by_column[c] for c in columns]

    def value(self, converted: list) -> bytes:
        """Value bytes (after-image) of a converted row."""
        return self._encode(self.value_datum(converted), self._value_writer)

    def _encode(self, datum: dict, writer: AvroWriter | None) -> bytes:
        if self._avro:
            return self.encode_avro(writer, datum)
        return encode_json(datum)

    def encode_avro(self, writer: AvroWriter, datum: dict) -> bytes:
        """writer.encode(datum) for a datum of this table's rows (a key, a value or an
        envelope holding them); raises EncodeError naming the table (and the column,
        when fastavro names its field) for a value the schema refuses."""
        try:
            return writer.encode(datum)
        except (ValueError, TypeError, OverflowError) as exc:
            raise EncodeError(f"table {self.table.qualified}{self._field_of(str(exc))}: {exc}") from exc

    def _field_of(self, message: str) -> str:
        """``, column "c" (type)`` for fastavro's ``... on field <name>`` message, else empty."""
        found = _ON_FIELD.search(message)
        for col, name in zip(self.table.columns, self._names, strict=True):
            if found and found.group(1) == name:
                return f", column {names.quote_ident(col.name)} ({col.pg_type})"
        return ""


# One encoder for every message: json.dumps with arguments builds a new encoder per call.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_RECORD_JSON = json.JSONEncoder(separators=(",", ":")).encode  # transactions-topic records: ASCII
_ascii = json.encoder.encode_basestring_ascii  # a JSON string literal, non-ASCII escaped (as json.dumps)


def encode_json(datum: Any) -> bytes:
    """Compact UTF-8 JSON of a datum (non-ASCII kept as is), the JSON encoding's message form."""
    return _JSON(datum).encode("utf-8")


def txn_record_json(kind: str, txid: int, position: str, ts_ms: int, counts: list[tuple[str, int]] | None) -> bytes:
    """The JSON of a BEGIN (counts None) or END (counts: [(data topic, messages)], sorted) record,
    byte for byte what :func:`encode_record` makes of its datum, without a dict or the encoder:
    every source transaction writes two."""
    esc = _ascii
    if counts is None:
        collections, total = "null", "null"
    else:
        collections = "[" + ",".join(f'{{"data_collection":{esc(t)},"event_count":{n}}}' for t, n in counts) + "]"
        total = str(sum(n for _, n in counts))
    return (f'{{"type":{esc(kind)},"txid":{txid},"position":{esc(position)},"ts_ms":{ts_ms},'
            f'"event_count":{total},"data_collections":{collections},"table":null}}').encode("ascii")


def txn_record_avro(header: bytes, kind: str, txid: int, position: str, ts_ms: int,
                    counts: list[tuple[str, int]] | None) -> bytes:
    """:func:`txn_record_json` in Avro (avro.TRANSACTION_SCHEMA) after header (the writer's registry
    prefix): byte for byte what :func:`encode_record` makes of the datum with that writer."""
    out = bytearray(header)
    _avro_string(kind, out)
    _avro_long(txid, out)
    _avro_string(position, out)
    _avro_long(ts_ms, out)
    if counts is None:
        out += b"\0\0\0"  # event_count, data_collections, table: null (union branch 0)
        return bytes(out)
    out.append(2)  # event_count: branch 1, a long
    _avro_long(sum(n for _, n in counts), out)
    out.append(2)  # data_collections: branch 1, an array in one block
    if counts:
        _avro_long(len(counts), out)
        for topic, n in counts:
            _avro_string(topic, out)
            _avro_long(n, out)
    out += b"\0\0"  # the array's end; table: null
    return bytes(out)


def encode_record(datum: dict, writer: AvroWriter | None) -> bytes:
    """Encode a transactions-topic record with writer (Avro) or as JSON when None."""
    if writer is not None:
        return writer.encode(datum)
    return _RECORD_JSON(datum).encode("utf-8")
