"""How many Kafka transactions a relay commits while it keeps up with pgbench -N (bench/logical.py's
tps round: the pgbench tables in a set, the relay streaming), per backend: committed records of the
set's positions topic (one per Kafka transaction) over the pgbench run, and the source transactions
each one carries. It splits the broker's CPU while streaming between per-message and per-Kafka-
transaction costs.

    .venv/bin/python -m bench.txn_rate [--seconds 20] [--backends logical,trigger]
"""

import argparse
import re
import time

from bench.capture_overhead import pgbench
from bench.common import LOGICAL, pgshovel, prepare, save_result, unique, write_config
from bench.logical import PGBENCH, VARIANTS, Relay, caught_up, identity
from bench.relay_batch import committed_count


def rate(cur, backend: str, seconds: int) -> dict:
    """{tps, kafka_txns, per_second, source_txns_each} of one pgbench run with backend's relay."""
    _, ident, _ = VARIANTS[backend]
    name = unique("txr")
    identity(cur, PGBENCH, ident)
    if backend in LOGICAL:
        identity(cur, ["pgbench_history"], "FULL")
    tables = [{"name": t, "allow_unkeyed": t == "pgbench_history"} for t in PGBENCH]
    pgshovel("set", "create", name, str(write_config(name, tables, backend)))
    relay = Relay(name, "--skip-snapshot")
    try:
        time.sleep(3)
        before = committed_count(f"{name}.positions")
        out = pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(seconds))
        caught_up(name, backend)
        txns = committed_count(f"{name}.positions") - before
    finally:
        relay.stop()
        pgshovel("set", "drop", name)
        identity(cur, PGBENCH, "DEFAULT")
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
    return {"tps": tps, "kafka_txns": txns, "per_second": txns / seconds,
            "source_txns_each": tps * seconds / max(txns, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--backends", default="logical,trigger")
    args = parser.parse_args()
    cur = prepare()
    result = {b: rate(cur, b, args.seconds) for b in args.backends.split(",")}
    for backend, got in result.items():
        print(f"{backend}: pgbench {got['tps']:,.0f} tps, {got['per_second']:.1f} Kafka transactions/s, "
              f"{got['source_txns_each']:.1f} source transactions each")
    print(f"results: {save_result('txn-rate', {'seconds': args.seconds, **result})}")


if __name__ == "__main__":
    main()
