"""CPU per change of decoding pgoutput Insert messages of the mixed table in process: the
Python converters vs the native decoder (native/src/pgoutput.rs), and the native JSON encode
of the row each gives (a list, or the native decoder's JSON text). No stack needed.

    .venv/bin/python -m bench.experiments.pgoutput_decode [--changes 100000]
"""

import argparse
import os
import struct
import time

from bench.peer.common import save_result
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import textforms
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.logical.pgoutput import relations as pgoutput_relations
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder, SetTable
from pgshovel2.relay.logical.relation_layout import RelationLayout

# (name, pg_type, kind, type OID, output text): bench/peer/workloads.py's mixed table, one typical row
COLUMNS = [("id", "bigint", "int8", 20, b"123456"), ("n", "integer", "int4", 23, b"42"),
           ("t", "text", "text", 25, b"some text value here, about forty chars"),
           ("v", "character varying(40)", "varchar", 1043, b"varchar value"),
           ("m", "numeric(12,2)", "numeric", 1700, b"12345.67"),
           ("d", "double precision", "float8", 701, b"0.123456789012345"), ("b", "boolean", "bool", 16, b"t"),
           ("ts", "timestamp with time zone", "timestamptz", 1184, b"2026-11-23 12:34:56.123456+00"),
           ("u", "uuid", "uuid", 2950, b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
           ("j", "jsonb", "jsonb", 3802, '{"a": 1, "b": "xé", "c": [1, 2, 3]}'.encode())]
TABLE = Table("s", "mixed", tuple(Column(n, i + 1, t, k, False, i > 0, 12 if k == "numeric" else None,
                                         2 if k == "numeric" else None)
                                  for i, (n, t, k, _, _) in enumerate(COLUMNS)), ("id",), "primary key")


def _tuple(values: list[bytes]) -> bytes:
    return struct.pack(">H", len(values)) + b"".join(b"t" + struct.pack(">I", len(v)) + v for v in values)


INSERT = b"I" + struct.pack(">I", 7) + b"N" + _tuple([c[4] for c in COLUMNS])


def decoder(python: bool) -> PgoutputDecoder:
    """A decoder of the mixed table's relation (7), its layout settled; python: no native decoder."""
    convs = [textforms.converter(c[3], 0) for c in COLUMNS]
    dec = PgoutputDecoder({TABLE.qualified: SetTable(TABLE, {i + 1: c[3] for i, c in enumerate(COLUMNS)}, convs)})
    rel = b"".join(b"\x00" + c[0].encode() + b"\x00" + struct.pack(">Ii", c[3], -1) for c in COLUMNS)
    dec.feed(b"R" + struct.pack(">I", 7) + b"s\x00mixed\x00d" + struct.pack(">H", len(COLUMNS)) + rel, 0)
    dec.feed(b"B" + struct.pack(">QqI", 0x90, 0, 5), 0)
    saved = pgoutput_relations.native_rows
    if python:
        pgoutput_relations.native_rows = lambda *_: None
    try:
        first = dec.feed(INSERT, 1)
        dec.settle(next(i for i in first if isinstance(i, RelationLayout)))
    finally:
        pgoutput_relations.native_rows = saved
    return dec


def measure(python: bool, changes: int) -> dict[str, float]:
    """{"decode_us", "encode_us"}: process CPU µs per change."""
    dec, enc = decoder(python), RowEncoder(TABLE, False)
    started = time.process_time()
    for _ in range(changes):
        items = dec.feed(INSERT, 1)
    decoded = time.process_time()
    row = items[-1].row
    for _ in range(changes):
        enc.encode_native(row)
    return {"decode_us": (decoded - started) * 1e6 / changes,
            "encode_us": (time.process_time() - decoded) * 1e6 / changes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=100_000)
    args = parser.parse_args()
    result = {"changes": args.changes, "load_average": os.getloadavg(),
              "python": measure(True, args.changes), "native": measure(False, args.changes)}
    for path in ("python", "native"):
        print(f"  {path}: " + ", ".join(f"{k} {v:.2f}" for k, v in result[path].items()), flush=True)
    print(save_result("pgoutput-decode", result))


if __name__ == "__main__":
    main()
