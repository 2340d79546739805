"""pgoutput messages' parts built as the protocol documentation lays them out, for the decoder's tests."""

import struct


def tuple_data(values) -> bytes:
    """TupleData of values: bytes -> 't' (text), None -> 'n' (NULL), ... -> 'u' (unchanged TOASTed value)."""
    out = struct.pack(">H", len(values))
    for v in values:
        out += b"n" if v is None else b"u" if v is ... else b"t" + struct.pack(">I", len(v)) + v
    return out
