"""Debezium 3.4's Connect forms of PostgreSQL types Kafka Connect has no type of its own for, as its
PostgreSQL connector writes them with its defaults (recorded: tests/fixtures/debezium-3.4.3.Final-
postgres.json, ``typed``): bit strings (``io.debezium.data.Bits``, or a boolean for ``bit(1)``),
``point`` (``io.debezium.data.geometry.Point``) and ``hstore`` (``hstore.handling.mode=json``:
``io.debezium.data.Json``).

Inputs are the capture trigger's text forms; outputs are JSON payload values (bytes as base64).
"""

import base64
import json
import re
import struct
from typing import Any

from pgshovel2.errors import EncodeError

POINT_SCHEMA = {"type": "struct", "fields": [{"type": "double", "optional": False, "field": "x"},
                                             {"type": "double", "optional": False, "field": "y"},
                                             {"type": "bytes", "optional": True, "field": "wkb"},
                                             {"type": "int32", "optional": True, "field": "srid"}],
                "name": "io.debezium.data.geometry.Point", "version": 1, "doc": "Geometry (POINT)"}
_WKB_POINT = b"\x01" + struct.pack("<I", 1)  # little-endian, geometry type 1 (Point)
_PAIR = re.compile(r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|NULL)\s*(,|$)')
_ESCAPED = re.compile(r"\\(.)")


def bits_raw(text: str) -> bytes:
    """A bit string ("101", first character the highest bit) -> Debezium's Bits: Java's
    BitSet.toByteArray() of its value (little-endian, no trailing zero bytes)."""
    if text.strip("01"):
        raise EncodeError(f"cannot parse bit string {text!r}")
    value = int(text, 2) if text else 0
    return value.to_bytes((value.bit_length() + 7) // 8, "little")


def bits(text: str) -> str:
    """:func:`bits_raw`, base64 (Connect's JSON form of bytes)."""
    return base64.b64encode(bits_raw(text)).decode("ascii")


def bit_boolean(text: str) -> bool:
    """bit(1) -> a boolean, as Debezium writes it."""
    if text not in ("0", "1"):
        raise EncodeError(f"cannot parse bit(1) {text!r}")
    return text == "1"


def point_raw(text: str) -> dict[str, Any]:
    """PostgreSQL point text "(x,y)" -> Debezium's Point struct {x, y, wkb (the OGC well-known
    binary, little-endian), srid null}."""
    try:
        x, y = (float(v) for v in text.strip().strip("()").split(","))
    except ValueError as exc:
        raise EncodeError(f"cannot parse point {text!r}") from exc
    return {"x": x, "y": y, "wkb": _WKB_POINT + struct.pack("<dd", x, y), "srid": None}


def point(text: str) -> dict[str, Any]:
    """:func:`point_raw` with wkb in base64 (Connect's JSON form of bytes)."""
    value = point_raw(text)
    return {**value, "wkb": base64.b64encode(value["wkb"]).decode("ascii")}


def hstore_json(text: str) -> str:
    """hstore text ('"a"=>"1", "b"=>NULL') -> Debezium's JSON text of it ('{"a":"1","b":null}':
    compact, pairs in hstore's order, non-ASCII kept)."""
    pairs: dict[str, str | None] = {}
    pos = 0
    while pos < len(text.rstrip()):
        m = _PAIR.match(text, pos)
        if m is None:
            raise EncodeError(f"cannot parse hstore at character {pos + 1}: {text[pos:pos + 40]!r}")
        key, value = m.group(1), m.group(2)
        pairs[_ESCAPED.sub(r"\1", key)] = None if value is None else _ESCAPED.sub(r"\1", value)
        pos = m.end()
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
