"""The output plugin's own cost, and the relay's parsing cost per record format.

N single-row-transaction-free changes (one transaction of N inserts into a
4-column table) are decoded from two slots created before them:
``pgshovel2_decoder`` (our binary records) and ``test_decoding`` (plain text),
with ``pg_logical_slot_peek_*_changes`` (not consumed, so rounds repeat), plus
our plugin with a filter matching no table (the cost of decoding the WAL
itself, which every plugin pays). Then the Python cost per change of turning
each plugin's output into the relay's row form (ours: struct + json.loads;
test_decoding: a regex per column, values still in session-dependent text),
and of the relay's Avro encoding of a row (what an Avro-in-C plugin would save).

    .venv/bin/python -m bench.peer.logical_plugin [--changes 200000] [--rounds 3]
"""

import argparse
import json
import re
import time

from bench.peer.common import prepare, summary
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.logical.records import records
from pgshovel2.relay.logical.source import RECORD_FORMAT, RecordDecoder

_TD_COLUMN = re.compile(r"(\w+)\[[^\]]+\]:('(?:[^']|'')*'|\S+)")


def _timed(cur, query: str, args: tuple) -> tuple[float, list]:
    started = time.monotonic()
    cur.execute(query, args)
    rows = cur.fetchall()
    return time.monotonic() - started, rows


def _parse_ours(payloads: list[bytes]) -> float:
    """Seconds to decode our records into Events (the relay's own decoder)."""
    decoder = RecordDecoder(["t"], "bench")
    started = time.monotonic()
    for data in payloads:
        decoder.decode(data)
    return time.monotonic() - started


def _parse_test_decoding(lines: list[str]) -> float:
    """Seconds to split test_decoding lines into (op, [column text]) (no value conversion yet)."""
    started = time.monotonic()
    for line in lines:
        if line.startswith("table "):
            [v for _, v in _TD_COLUMN.findall(line)]
    return time.monotonic() - started


def _avro_encode(rows: list[list]) -> float:
    """Seconds for the relay's convert + key + value Avro encoding of rows (what Avro in C would replace)."""
    cols = (Column("id", 1, "integer", "int4", False, False), Column("n", 2, "integer", "int4", False, True),
            Column("s", 3, "text", "text", False, True), Column("ts", 4, "timestamptz", "timestamptz", False, True))
    table = Table("bench_relay", "t", cols, ("id",), "primary key")
    enc = RowEncoder(table, True, AvroWriter(avro.key_schema("b", table), 1),
                     AvroWriter(avro.value_schema("b", table), 2))
    started = time.monotonic()
    for row in rows:
        conv = enc.convert(row)
        enc.key(conv)
        enc.value(conv)
    return time.monotonic() - started


def measure(changes: int, rounds: int) -> dict:
    """Per-change microseconds: plugin decoding (ours, test_decoding, ours filtering everything out),
    Python parsing of each output, and the relay's Avro encoding."""
    cur = prepare()
    name = f"plugin{time.time_ns() % 10**9}"
    cur.execute(f"CREATE TABLE bench_relay.{name} (id int PRIMARY KEY, n int, s text, ts timestamptz)")
    cur.execute("CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder")
    slots = {"ours": f"{name}_ours", "test_decoding": f"{name}_td"}
    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgshovel2_decoder')", (slots["ours"],))
    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slots["test_decoding"],))
    try:
        cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100), now() "
                    "FROM generate_series(1, %s) g", (changes,))
        cur.execute("SELECT %s::regclass::oid", (f"bench_relay.{name}",))
        spec = f"{cur.fetchone()[0]}:1,2,3,4"
        queries = {
            "ours": ("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'format', %s, "
                     "'tables', %s)", (slots["ours"], RECORD_FORMAT, spec)),
            "ours_filtered_out": ("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                                  "'format', %s, 'tables', '1:1')", (slots["ours"], RECORD_FORMAT)),
            "test_decoding": ("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)",
                              (slots["test_decoding"],)),
        }
        runs: dict[str, list[float]] = {k: [] for k in (*queries, "parse_ours", "parse_test_decoding",
                                                         "relay_avro_encode")}
        for _ in range(rounds):
            outputs = {}
            for key, (query, args) in queries.items():
                seconds, outputs[key] = _timed(cur, query, args)
                runs[key].append(seconds / changes * 1e6)
            payloads = [rec for r in outputs["ours"] for rec in records(bytes(r[0]))]
            runs["parse_ours"].append(_parse_ours(payloads) / changes * 1e6)
            runs["parse_test_decoding"].append(
                _parse_test_decoding([r[0] for r in outputs["test_decoding"]]) / changes * 1e6)
            # an I record: kind, LSN, table index, flags, length, then the row at byte 16
            rows = [json.loads(p[16:]) for p in payloads if p[:1] == b"I"][:50_000]
            runs["relay_avro_encode"].append(_avro_encode(rows) / len(rows) * 1e6)
        sizes = {"ours_bytes_per_change": sum(len(p) for p in payloads) / changes,
                 "test_decoding_bytes_per_change": sum(len(r[0]) for r in outputs["test_decoding"]) / changes}
    finally:
        for slot in slots.values():
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        cur.execute(f"DROP TABLE bench_relay.{name}")
    out = {f"{k}_us_per_change": summary(v) for k, v in runs.items()}
    out.update(sizes)
    out["workload"] = f"one transaction of {changes} inserts (int, int, text(100), timestamptz), peek, {rounds} rounds"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.changes, args.rounds), indent=2))


if __name__ == "__main__":
    main()
