"""Debezium's ``unavailable.value.placeholder`` in the ``debezium`` envelope (docs/wire.rst,
"Envelope debezium"): what an UPDATE's unchanged TOASTed value, which the WAL does not log
(replica identity other than FULL), becomes in ``after`` with ``debezium.unchanged_toast:
placeholder``.

As Debezium's PostgreSQL connector: the placeholder text in a string field, its UTF-8 bytes in a
bytes field, a one-element array of it in an array of strings, its UTF-8 bytes as numbers in an
array of int2/int4/int8, and in a uuid array the one UUID Java's ``UUID.nameUUIDFromBytes`` makes
of its bytes (``b68a35a7-17ad-35b3-af2a-ae46edb4545a`` for the default text). A column whose
form holds none of these (a json value in the schemaless JSON form, a Connect numeric struct, an
array of other elements) keeps null, which its field admits
(:func:`pgshovel2.backends.logical.unlogged_nullable`). Either way the message's
``pgshovel.unchanged`` header names the column, so pgshovel2's consumers keep the previous
value instead of the placeholder.

Values are in the capture trigger's forms (:mod:`pgshovel2.codec.types`), filled in before the
row is encoded, so every codec path writes them alike.
"""

import dataclasses
import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.connect import connect_type
from pgshovel2.codec.connect_modes import DEFAULT, Modes
from pgshovel2.codec.rows import as_values
from pgshovel2.codec.types import field_type

CONNECT, AVRO, JSON = "connect", "avro", "json"  # the set's form of the events
_INT_ARRAYS = ("int2", "int4", "int8")


def _is_string(col: Column, form: str, modes: Modes = DEFAULT) -> bool:
    """Whether col (not an array) travels as a plain string in form (modes: the Connect form's value
    modes), its capture form as it is."""
    if form == CONNECT:
        ct = connect_type(col, modes=modes)
        return ct.to_value is None and ct.schema["type"] == "string"
    ft = field_type(col)
    return ft.avro == "string" and (ft.to_avro if form == AVRO else ft.to_json) is None


def name_uuid(data: bytes) -> str:
    """Java's ``UUID.nameUUIDFromBytes(data)``: the MD5 of data as a version 3 UUID."""
    digest = bytearray(hashlib.md5(data).digest())
    digest[6] = (digest[6] & 0x0F) | 0x30
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


def _placeholder(col: Column, text: str, form: str, modes: Modes) -> Any:
    """The capture form of col's placeholder value, or None (col keeps null)."""
    if col.is_array:
        if col.kind in _INT_ARRAYS:
            return list(text.encode("utf-8"))
        if col.kind == "uuid":
            return [name_uuid(text.encode("utf-8"))]
        return [text] if _is_string(dataclasses.replace(col, is_array=False), form, modes) else None
    if col.kind == "bytea":
        return text.encode("utf-8").hex()
    return text if _is_string(col, form, modes) else None


def placeholders(table: Table, text: str | None, form: str, modes: Modes = DEFAULT) -> dict[int, Any]:
    """Column index (in table.columns) -> the capture form of its placeholder value, for the
    columns whose form can hold text (the placeholder, Debezium's
    ``unavailable.value.placeholder``) in form (CONNECT, AVRO or JSON). Empty when text is None
    (``unchanged_toast: header``). Key columns never take it (PostgreSQL logs them)."""
    if text is None:
        return {}
    out = {}
    for i, col in enumerate(table.columns):
        value = None if col.name in table.key else _placeholder(col, text, form, modes)
        if value is not None:
            out[i] = value
    return out


def fill(row: Any, unchanged: Sequence[int], values: dict[int, Any]) -> Any:
    """row (capture form, raw or parsed) with each unchanged position that values has set to its
    placeholder value; row itself when none is."""
    if not any(i in values for i in unchanged):
        return row
    filled = list(as_values(row))
    for i in unchanged:
        if i in values:
            filled[i] = values[i]
    return filled
