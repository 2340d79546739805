"""The native row codec (the ``pgshovel2_native`` extension, Rust, built from native/ by
scripts/install.sh), with the pure-Python codec as its fallback.

:func:`row_codec` gives a table's native codec, or None when the extension is absent, is
turned off (``PGSHOVEL2_NATIVE=0``) or cannot encode that table's schemas. The column plans
come from :attr:`pgshovel2.codec.types.FieldType.native`, so the type mapping stays defined in
types.py. A codec returns None for a row it would not encode exactly as Python does (an
array value, a value of an unexpected form); the caller encodes that row in Python, which
also names the error of a bad value. The two agree byte for byte
(tests/unit/test_native_codec.py).
"""

import logging
import os
from typing import Any

from pgshovel2.codec.types import FieldType

log = logging.getLogger(__name__)
_LOADED: list[Any] = []  # [module or None], once


def module() -> Any:
    """The pgshovel2_native module, or None (absent, or PGSHOVEL2_NATIVE=0); logs once which
    codec runs."""
    if not _LOADED:
        mod = None
        if os.environ.get("PGSHOVEL2_NATIVE", "1") == "0":
            log.info("row codec: Python (PGSHOVEL2_NATIVE=0)")
        else:
            try:
                import pgshovel2_native as mod
                log.info("row codec: native (pgshovel2_native)")
            except ImportError as exc:
                log.info("row codec: Python (the native codec is not installed: %s)", exc)
        _LOADED.append(mod)
    return _LOADED[0]


def _unions(schema: dict, names: list[str]) -> list[tuple[int, int]] | None:
    """Per field of an Avro record schema: (the branch of null in its union, -1 when it takes no
    null; the branch of a non-null value: the first other one, -1 when the type is no union);
    None when the fields are not names in that order (the codec then stays Python)."""
    fields = schema.get("fields", [])
    if [f["name"] for f in fields] != names:
        return None
    out = []
    for f in fields:
        t = f["type"]
        if not isinstance(t, list):
            out.append((-1, -1))
        else:
            out.append((t.index("null") if "null" in t else -1, next(i for i, b in enumerate(t) if b != "null")))
    return out


Schema = tuple[dict, bytes] | None  # (Avro record schema, prefix of its messages)


def row_codec(types: list[FieldType], names: list[str], json_names: list[str], key_idx: list[int],
              avro: bool, key: Schema, value: Schema) -> Any:
    """A native RowCodec for rows of columns of types, or None (see the module docstring).

    names: the value's field names (escaped Avro names with Avro); json_names: the column
    names; key_idx: key columns' positions in key order; key/value (Avro): the key and value
    record schemas with the prefix their messages get (``b""``: a record inside another).
    """
    mod = module()
    if mod is None or (avro and (value is None or (key_idx and key is None))):
        return None
    key_names = [names[i] for i in key_idx]
    if avro:
        nullable = _unions(value[0], names)
        key_nullable = _unions(key[0], key_names) if key_idx else []
        headers = (key[1] if key_idx else b"", value[1])
    else:
        nullable, key_nullable, headers = [(-1, -1)] * len(names), [(-1, -1)] * len(key_idx), (b"", b"")
    if nullable is None or key_nullable is None:
        return None
    return mod.RowCodec([t.native for t in types], nullable, key_idx, key_nullable, json_names, avro, *headers)
