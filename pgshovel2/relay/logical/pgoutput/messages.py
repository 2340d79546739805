"""pgoutput's logical replication message formats (protocol version 1): the fields of each
message the decoder (:mod:`pgshovel2.relay.logical.pgoutput.decoder`) reads, parsed from the message's
bytes (its kind byte first); no state, no I/O.

Formats: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html.
"""

import struct

from pgshovel2.errors import RelayError

HEARTBEAT_PREFIX = b"pgshovel2.heartbeat"
VERSION_PREFIX = b"pgshovel2.version"
BEGIN_FIELDS = struct.Struct(">QqI")      # after the kind byte: final LSN, commit time (µs since 2000), xid
COMMIT_FIELDS = struct.Struct(">BQQq")    # after the kind byte: flags, commit LSN, end LSN, commit time
U32, U16, U64 = struct.Struct(">I"), struct.Struct(">H"), struct.Struct(">Q")

# A Relation's columns: (name, type OID, typmod) each, in the relation's order.
Columns = list[tuple[str, int, int]]


def cstring(data: bytes, pos: int) -> tuple[str, int]:
    """(the NUL-terminated UTF-8 string at pos, the position after its NUL)."""
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8"), end + 1


def tuple_data(data: bytes, pos: int) -> tuple[list, int]:
    """TupleData at pos -> ([text | None (NULL) | ... (unchanged TOASTed value)], next position).
    Raises RelayError for a binary value (never asked for)."""
    (n,) = U16.unpack_from(data, pos)
    pos += 2
    out: list = []
    for _ in range(n):
        kind = data[pos]
        pos += 1
        if kind == 116:  # t
            (size,) = U32.unpack_from(data, pos)
            out.append(data[pos + 4:pos + 4 + size].decode("utf-8"))
            pos += 4 + size
        elif kind == 110:  # n
            out.append(None)
        elif kind == 117:  # u
            out.append(...)
        else:
            raise RelayError(f"pgoutput sent a column value of kind {chr(kind)!r} (binary is not asked for)")
    return out, pos


def relation(data: bytes) -> tuple[int, str, str, Columns]:
    """A Relation message -> (relation OID, schema, table name, columns)."""
    (oid,) = U32.unpack_from(data, 1)
    schema, pos = cstring(data, 5)
    name, pos = cstring(data, pos)
    pos += 1  # replica identity setting
    (ncols,) = U16.unpack_from(data, pos)
    pos += 2
    columns = []
    for _ in range(ncols):
        col, pos = cstring(data, pos + 1)  # after the column's flags byte
        type_oid, typmod = struct.unpack_from(">Ii", data, pos)
        pos += 8
        columns.append((col, type_oid, typmod))
    return oid, schema, name, columns


def logical_message(data: bytes) -> tuple[bool, int, bytes, int]:
    """A logical decoding Message -> (transactional, its LSN, prefix, where its content starts
    in data: after the content's 4-byte length)."""
    flags = data[1]
    (lsn,) = U64.unpack_from(data, 2)
    end = data.index(b"\0", 10)
    return bool(flags & 1), lsn, data[10:end], end + 5


def truncated(data: bytes) -> list[int]:
    """A Truncate message -> the OIDs of the relations it truncates."""
    (n,) = U32.unpack_from(data, 1)
    return [U32.unpack_from(data, 6 + 4 * i)[0] for i in range(n)]


def change_tuples(kind: bytes, data: bytes, table: str) -> tuple[list | None, bool, list | None]:
    """An Insert, Update or Delete message (kind b"I", b"U", b"D") -> (old tuple or None, whether
    the old tuple is the whole row ('O': REPLICA IDENTITY FULL; else 'K', its key), new tuple or
    None for a Delete), tuples as :func:`tuple_data` gives them. Raises RelayError, naming table,
    for an Insert or Update without its new tuple."""
    pos = 5
    old, full = None, data[pos:pos + 1] == b"O"
    if data[pos:pos + 1] in (b"K", b"O"):
        old, pos = tuple_data(data, pos + 1)
    new = None
    if kind != b"D":
        if data[pos:pos + 1] != b"N":
            raise RelayError(f"pgoutput sent a {kind.decode()} message of {table} without its new row")
        new, _ = tuple_data(data, pos + 1)
    return old, full, new
