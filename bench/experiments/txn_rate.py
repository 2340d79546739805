"""How many Kafka transactions a relay commits while it keeps up with pgbench -N (bench/peer/logical.py's
tps round: the pgbench tables in a set, the relay streaming), per backend: committed records of the
set's positions topic (one per Kafka transaction) over the pgbench run, and the source transactions
each one carries, and the Kafka broker's CPU per source transaction over the run. With
``--modes transactions,no-transactions`` each backend also runs with the relay's idempotent-only
producer (``--no-transactions``: the same messages, no Kafka transactions), rounds alternating: what
the broker spends on Kafka transactions, apart from the messages.

    .venv/bin/python -m bench.experiments.txn_rate [--seconds 20] [--backends logical,trigger]
        [--modes transactions,no-transactions] [--rounds 1]
"""

import argparse
import re
import time

from bench.peer.capture_overhead import pgbench
from bench.peer.common import prepare, save_result
from bench.peer.counter import committed_count
from bench.peer.logical import caught_up, cpu_seconds, helper_pids, pgbench_set


def rate(cur, backend: str, seconds: int, mode: str = "transactions") -> dict:
    """{tps, kafka_txns, per_second, source_txns_each, kafka_us_per_source_txn} of one pgbench run
    with backend's relay (mode: transactions, or no-transactions: at-least-once)."""
    with pgbench_set(cur, backend, f"--{mode}") as (name, _relay):
        time.sleep(3)
        kafka = helper_pids(cur, None, None)["kafka"]
        before, broker = committed_count(f"{name}.positions"), cpu_seconds(kafka)
        out = pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(seconds))
        broker = cpu_seconds(kafka) - broker
        caught_up(name, backend)
        txns = committed_count(f"{name}.positions") - before
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
    return {"tps": tps, "kafka_txns": txns, "per_second": txns / seconds,
            "source_txns_each": tps * seconds / max(txns, 1), "kafka_us_per_source_txn": broker * 1e6 / (tps * seconds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--backends", default="logical,trigger")
    parser.add_argument("--modes", default="transactions")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cur = prepare()
    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for backend in args.backends.split(","):
            for mode in args.modes.split(","):
                got = rate(cur, backend, args.seconds, mode)
                runs.setdefault(f"{backend}/{mode}", []).append(got)
                print(f"{backend}/{mode}: pgbench {got['tps']:,.0f} tps, {got['per_second']:.1f} Kafka commits/s "
                      f"({got['source_txns_each']:.1f} source transactions each), broker "
                      f"{got['kafka_us_per_source_txn']:.0f} µs CPU a source transaction", flush=True)
    print(f"results: {save_result('txn-rate', {'seconds': args.seconds, 'runs': runs})}")


if __name__ == "__main__":
    main()
