"""Capture overhead: pgbench tps with no capture, PgQ's pgq.jsontriga and our
pgshovel2.capture trigger on the pgbench tables, interleaved rounds.

Usage (local stack up): .venv/bin/python bench/capture_overhead.py [--rounds 3] [--seconds 15]
Writes bench/results/capture-<UTC time>.json and prints min/median/max tps and
the median's ratio to no capture. (The full `make bench` harness is a later issue.)
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

import psycopg2

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PORT = os.environ.get("PG_PORT", "55432")
DSN = f"host=127.0.0.1 port={PORT} dbname=pgshovel user=postgres"
TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]
QUEUE = "bench_capture"


def columns(cur, table: str) -> tuple[str, str]:
    cur.execute("SELECT string_agg(attnum::text, ',' ORDER BY attnum) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", (table,))
    cols = cur.fetchone()[0]
    cur.execute("SELECT coalesce(string_agg(k::text, ','), '') FROM pg_index, unnest(indkey) k "
                "WHERE indrelid = %s::regclass AND indisprimary", (table,))
    return cols, cur.fetchone()[0]


def set_triggers(cur, variant: str) -> None:
    for table in TABLES:
        cur.execute(f"DROP TRIGGER IF EXISTS bench_capture ON {table}")
        if variant == "jsontriga":
            cur.execute(f"CREATE TRIGGER bench_capture AFTER INSERT OR UPDATE OR DELETE ON {table} "
                        f"FOR EACH ROW EXECUTE FUNCTION pgq.jsontriga('{QUEUE}')")
        elif variant == "pgshovel2":
            cols, keys = columns(cur, table)
            cur.execute(f"CREATE TRIGGER bench_capture AFTER INSERT OR UPDATE OR DELETE ON {table} "
                        f"FOR EACH ROW EXECUTE FUNCTION pgshovel2.capture('{QUEUE}', '{table}', "
                        f"'{cols}', '{keys}', 'all')")


def pgbench(*args: str) -> str:
    return subprocess.run([str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", PORT, "-U", "postgres",
                           *args, "pgshovel"], check=True, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--scale", type=int, default=10)
    args = parser.parse_args()
    pgbench("-i", "-q", "-s", str(args.scale))
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION IF NOT EXISTS pgq; CREATE EXTENSION IF NOT EXISTS pgshovel2")
    cur.execute("SELECT pgq.create_queue(%s)", (QUEUE,))
    cur.execute("SELECT pgq.register_consumer(%s, 'bench')", (QUEUE,))
    variants = ["none", "jsontriga", "pgshovel2"]
    tps: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for _ in range(args.rounds):
            for variant in variants:
                set_triggers(cur, variant)
                cur.execute("CHECKPOINT")
                out = pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(args.seconds))
                tps[variant].append(float(re.search(r"tps = ([\d.]+)", out).group(1)))
    finally:
        set_triggers(cur, "none")
        cur.execute("SELECT pgq.unregister_consumer(%s, 'bench')", (QUEUE,))
        cur.execute("SELECT pgq.drop_queue(%s)", (QUEUE,))
    base = statistics.median(tps["none"])
    result = {"workload": f"pgbench -N -c 4 -j 2 -T {args.seconds}, scale {args.scale}",
              "tps": tps, "median_ratio_to_none": {v: statistics.median(t) / base for v, t in tps.items()}}
    out = Path(__file__).parent / "results" / f"capture-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"{'capture':<10} {'min':>8} {'median':>8} {'max':>8}  ratio")
    for v, t in tps.items():
        print(f"{v:<10} {min(t):8.0f} {statistics.median(t):8.0f} {max(t):8.0f}  "
              f"{statistics.median(t) / base:.3f}")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
