"""A compiled Avro binary encoder for flat records, the common case of keys
and row values: every field of a primitive type (logical types included, as
their values are already converted to the base type), a union of null and
one primitive, or a record of such fields defined in place (or a union of null
and one: the debezium envelope's source and transaction blocks), or referenced by
its full name after its definition (the Connect form's ``after``). About twice as
fast as a schemaless_writer call per record; records with arrays or named
references return None here and use fastavro (the transactions topic's BEGIN and
END records have templates of their own: pgshovel2.codec.rows.txn_record_avro).
"""

import struct
from collections.abc import Callable
from typing import Any

Encode = Callable[[Any, bytearray], None]
_PACK_FLOAT, _PACK_DOUBLE = struct.Struct("<f").pack, struct.Struct("<d").pack


def write_long(n: int, out: bytearray) -> None:
    """Append Avro's long (zigzag varint) of n to out."""
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _bytes(b: bytes, out: bytearray) -> None:
    write_long(len(b), out)
    out += b


def write_string(s: str, out: bytearray) -> None:
    """Append Avro's string (length, UTF-8) of s to out."""
    _bytes(s.encode("utf-8"), out)


def _boolean(v: bool, out: bytearray) -> None:
    out.append(1 if v else 0)


def _float(v: float, out: bytearray) -> None:
    out += _PACK_FLOAT(v)


def _double(v: float, out: bytearray) -> None:
    out += _PACK_DOUBLE(v)


_PRIMITIVES: dict[str, Encode] = {"int": write_long, "long": write_long, "string": write_string, "bytes": _bytes,
                                  "boolean": _boolean, "float": _float, "double": _double}


def _primitive(schema: Any) -> Encode | None:
    # a primitive with attributes (logicalType: values come converted; connect.*: annotations only)
    if isinstance(schema, dict):
        schema = schema.get("type")
    return _PRIMITIVES.get(schema) if isinstance(schema, str) else None


def _nullable(null_index: int, encode: Encode) -> Encode:
    present = 1 - null_index

    def write(v: Any, out: bytearray) -> None:
        if v is None:
            out.append(null_index * 2)  # zigzag of the branch index
        else:
            out.append(present * 2)
            encode(v, out)
    return write


def _is_record(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "record"


def _single(schema: Any, named: dict[str, Encode]) -> Encode | None:
    if _is_record(schema):
        return _record(schema, named)
    if isinstance(schema, str) and schema in named:  # a record defined before, by full name
        return named[schema]
    return _primitive(schema)


def _field_encoder(schema: Any, named: dict[str, Encode]) -> Encode | None:
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        null_index = schema.index("null")
        encode = _single(schema[1 - null_index], named)
        return _nullable(null_index, encode) if encode else None
    return _single(schema, named)


def _record(schema: dict[str, Any], named: dict[str, Encode] | None = None) -> Encode | None:
    named = {} if named is None else named
    fields = []
    for f in schema["fields"]:
        encode = _field_encoder(f["type"], named)
        if encode is None:
            return None
        fields.append((f["name"], encode))

    def write(datum: dict[str, Any], out: bytearray) -> None:
        for name, encode in fields:
            encode(datum[name], out)
    if "namespace" in schema:
        named[f"{schema['namespace']}.{schema['name']}"] = write
    return write


def compile_record(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bytes] | None:
    """An encoder of datums (field name -> value) of a record schema, or None if it is not of the
    forms above."""
    write = _record(schema) if _is_record(schema) else None
    if write is None:
        return None

    def encode_record(datum: dict[str, Any]) -> bytes:
        out = bytearray()
        write(datum, out)
        return bytes(out)
    return encode_record
