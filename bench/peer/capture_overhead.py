"""Capture overhead: pgbench tps with no capture, PgQ's pgq.jsontriga, our C trigger
pgshovel2.capture and our PL/pgSQL capture (the trigger functions pgshovel2_pl.register
generates, as a ``capture: plpgsql`` set has) on the pgbench tables, interleaved rounds.

    .venv/bin/python -m bench.peer.capture_overhead [--rounds 3] [--seconds 15]
(local stack up, PG_PORT etc. as bench/peer/common.py reads them; `make bench` runs it with the
other figures).
"""

import argparse
import json
import re
import statistics
import subprocess

import psycopg2

from bench.peer.common import DSN, PG_BIN, PG_PORT, summary
from pgshovel2.backends import plcapture

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
        elif variant in ("pgshovel2", "pgshovel2_pl"):
            cols, keys = columns(cur, table)
            function = "pgshovel2.capture"
            if variant == "pgshovel2_pl":
                function = "pgshovel2_pl." + plcapture.register(cur, QUEUE, table, cols, keys, "all")
            cur.execute(f"CREATE TRIGGER bench_capture AFTER INSERT OR UPDATE OR DELETE ON {table} "
                        f"FOR EACH ROW EXECUTE FUNCTION {function}('{QUEUE}', '{table}', "
                        f"'{cols}', '{keys}', 'all')")


def pgbench(*args: str) -> str:
    return subprocess.run([str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", PG_PORT, "-U", "postgres",
                           *args, "pgshovel"], check=True, capture_output=True, text=True).stdout


def measure(rounds: int, seconds: int, scale: int) -> dict:
    """{"<variant>": summary of tps, "ratio_to_none": {variant: median ratio}, "workload"}."""
    pgbench("-i", "-q", "-s", str(scale))
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION IF NOT EXISTS pgq; CREATE EXTENSION IF NOT EXISTS pgshovel2")
    plcapture.ensure(cur)
    cur.execute("SELECT pgq.create_queue(%s)", (QUEUE,))
    cur.execute("SELECT pgq.register_consumer(%s, 'bench')", (QUEUE,))
    variants = ["none", "jsontriga", "pgshovel2", "pgshovel2_pl"]
    tps: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for _ in range(rounds):
            for variant in variants:
                set_triggers(cur, variant)
                cur.execute("CHECKPOINT")
                out = pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(seconds))
                tps[variant].append(float(re.search(r"tps = ([\d.]+)", out).group(1)))
    finally:
        set_triggers(cur, "none")
        plcapture.forget(cur, QUEUE)
        cur.execute("SELECT pgq.unregister_consumer(%s, 'bench')", (QUEUE,))
        cur.execute("SELECT pgq.drop_queue(%s)", (QUEUE,))
        conn.close()
    base = statistics.median(tps["none"])
    return {"workload": f"pgbench -N -c 4 -j 2 -T {seconds}, scale {scale}, interleaved",
            **{v: summary(t) for v, t in tps.items()},
            "ratio_to_none": {v: statistics.median(t) / base for v, t in tps.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--scale", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.seconds, args.scale), indent=2))


if __name__ == "__main__":
    main()
