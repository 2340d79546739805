"""Row encoders: a captured row (trigger form, list in column order) -> key and value bytes."""

import json
from collections.abc import Callable
from typing import Any

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.types import field_type
from pgshovel2.errors import EncodeError

Converters = list[tuple[int, Callable[[Any], Any]]]


class RowEncoder:
    """Encodes rows of one table in one encoding.

    Rows are lists of trigger-form values in the order of ``table.columns``.
    ``key(row)`` is None for an unkeyed table. Raises EncodeError naming the
    table and column for a value the encoding cannot represent.
    """

    def __init__(self, table: Table, avro: bool, key_writer: AvroWriter | None = None,
                 value_writer: AvroWriter | None = None):
        self.table = table
        types = [field_type(c) for c in table.columns]
        attr = "to_avro" if avro else "to_json"
        self._convs: Converters = [(i, getattr(t, attr)) for i, t in enumerate(types)
                                   if getattr(t, attr) is not None]
        field_names = [names.avro_name(c.name) if avro else c.name for c in table.columns]
        self._names = field_names
        positions = {c.name: i for i, c in enumerate(table.columns)}
        self._key_idx = [positions[k] for k in table.key]
        self._key_names = [field_names[i] for i in self._key_idx]
        self._avro = avro
        self._key_writer, self._value_writer = key_writer, value_writer

    def convert(self, row: list) -> list:
        """Apply the column converters to a row (copy; SQL NULL stays None)."""
        out = list(row)
        for i, conv in self._convs:
            v = out[i]
            if v is not None:
                try:
                    out[i] = conv(v)
                except (EncodeError, ValueError, TypeError, OverflowError) as exc:
                    col = self.table.columns[i]
                    raise EncodeError(f"table {self.table.qualified}, column "
                                      f"{names.quote_ident(col.name)} ({col.pg_type}): {exc}") from exc
        return out

    def key(self, converted: list) -> bytes | None:
        """Key bytes of a converted row, None for an unkeyed table."""
        if not self._key_idx:
            return None
        datum = {n: converted[i] for n, i in zip(self._key_names, self._key_idx, strict=True)}
        return self._encode(datum, self._key_writer)

    def value_datum(self, converted: list) -> dict[str, Any]:
        """The row as a datum: {field name: converted value} in column order.

        Field names are the escaped Avro names with Avro, the column names with JSON.
        """
        return dict(zip(self._names, converted, strict=True))

    def value(self, converted: list) -> bytes:
        """Value bytes (after-image) of a converted row."""
        return self._encode(self.value_datum(converted), self._value_writer)

    def _encode(self, datum: dict, writer: AvroWriter | None) -> bytes:
        if self._avro:
            return writer.encode(datum)
        return encode_json(datum)


# One encoder for every message: json.dumps with arguments builds a new encoder per call.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_json(datum: Any) -> bytes:
    """Compact UTF-8 JSON of a datum (non-ASCII kept as is), the JSON encoding's message form."""
    return _JSON(datum).encode("utf-8")


def encode_record(datum: dict, writer: AvroWriter | None) -> bytes:
    """Encode a transactions-topic record with writer (Avro) or as JSON when None."""
    if writer is not None:
        return writer.encode(datum)
    return json.dumps(datum, separators=(",", ":")).encode("utf-8")
