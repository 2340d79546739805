"""Relay memory under one large value (GOALS.md: relay RSS under a 50 MB value <= baseline + 2x the
largest value): per capture path and value size, a set on a table (id, body text) whose relay
relays one small row and runs idle until its RSS settles (the baseline: VmRSS then), then one row
with a body of ``mb`` MiB is inserted and relayed; the peak is the relay's VmHWM once the row is in Kafka. Reported:
baseline, peak, peak - baseline and that over the value's size (the goal: <= 2).

    .venv/bin/python -m bench.peer.value_memory [--mb 10,50] [--backends trigger,plpgsql,logical,pgoutput]
                                           [--encoding json|avro]
"""

import argparse
import json
import time
from pathlib import Path

from bench.peer.common import BOOTSTRAP, CLUSTER, ENV, LOGICAL, create_set, drop_set, prepare, relay_running, unique
from bench.peer.relay_memory import peak_rss_mib
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops import status

BACKENDS = ("trigger", "plpgsql", *LOGICAL)  # bench names: C capture, PL/pgSQL capture, our plugin, pgoutput
SETTLE_S = 3.0  # seconds an idle relay runs before its RSS is taken as the baseline


def rss_mib(pid: int) -> float:
    """VmRSS of a live process, MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def measure_one(mb: int, backend: str, encoding: str = "json") -> dict:
    """{backend, encoding, value_mib, baseline_mib, peak_mib, over_baseline_mib, ratio_to_value}
    of one relay run relaying one row with an mb-MiB text."""
    cur = prepare()
    name = unique("val")
    create_set(cur, name, encoding, columns="id int PRIMARY KEY, body text", backend=backend)
    if backend in LOGICAL:
        cur.execute(f"ALTER TABLE bench_relay.{name} REPLICA IDENTITY FULL")
    try:
        with relay_running(name) as (proc, _):
            cur.execute(f"INSERT INTO bench_relay.{name} VALUES (0, 'warm-up')")  # a relay that has relayed
            with ClusterStore(ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], CLUSTER) as store:
                status.wait_caught_up(store, name, BOOTSTRAP, timeout=600)
            time.sleep(SETTLE_S)
            baseline = rss_mib(proc.pid)
            cur.execute(f"INSERT INTO bench_relay.{name} VALUES (1, repeat('x', %s))", (mb * 1024 * 1024,))
            with ClusterStore(ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], CLUSTER) as store:
                status.wait_caught_up(store, name, BOOTSTRAP, timeout=600)
            peak = peak_rss_mib(proc.pid)
    finally:
        drop_set(cur, name)
    return {"backend": backend, "encoding": encoding, "value_mib": mb, "baseline_mib": round(baseline, 1),
            "peak_mib": round(peak, 1), "over_baseline_mib": round(peak - baseline, 1),
            "ratio_to_value": round((peak - baseline) / mb, 2)}


def measure(sizes: tuple[int, ...] = (10, 50), backends: tuple[str, ...] = BACKENDS,
            encodings: tuple[str, ...] = ("json", "avro")) -> dict:
    """{"runs": [measure_one of each size, backend and encoding], "worst_ratio": the largest
    ratio_to_value of the largest size (GOALS.md's goal: <= 2)}."""
    runs = [measure_one(mb, b, e) for mb in sizes for b in backends for e in encodings]
    largest = max(sizes)
    return {"runs": runs, "worst_ratio": max(r["ratio_to_value"] for r in runs if r["value_mib"] == largest)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", default="10,50", help="value sizes, MiB, comma-separated")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--encoding", default="json,avro")
    args = parser.parse_args()
    result = measure(tuple(int(x) for x in args.mb.split(",")), tuple(args.backends.split(",")),
                     tuple(args.encoding.split(",")))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
