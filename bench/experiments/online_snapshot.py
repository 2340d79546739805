"""Online snapshot (``pgshovel set snapshot``) against the initial snapshot, and the stream's latency
while one runs (trigger backend, or ``--backend logical`` / ``pgoutput``).

One set, two tables: ``big`` (``--rows`` rows of ~120 bytes) and ``lat`` (one row per pgbench
transaction: ``clock_timestamp()``). The relay's first start takes the initial snapshot (rate from
its log); then pgbench inserts into ``lat`` at ``--tps`` for ``--seconds``: first half without, then
with an online snapshot of ``big`` running. Prints JSON: the initial snapshot's rows/s, the online
snapshot's rows/s (rows emitted / time from request to done, as the relay reports them), and the
stream's p50/p99 commit-to-consumer latency before and during the online snapshot. No pass/fail.

    .venv/bin/python -m bench.experiments.online_snapshot [--rows 200000] [--tps 500] [--seconds 40] [--chunk-size 4096]
"""

import argparse
import json
import re
import subprocess
import threading
import time

from bench.peer.common import BIN, CLUSTER, ENV, PG_BIN, PG_PORT, WORK, pgshovel, prepare, unique, write_config
from bench.peer.latency import Arrivals, percentile
from pgshovel2 import names
from pgshovel2.cluster import ClusterStore


def _relay(name: str) -> tuple[subprocess.Popen, float]:
    """Start the relay of set name (initial snapshot); returns (process, initial snapshot rows/s)."""
    log = WORK / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "pgshovel-kafka-relay"), name, "--progress-interval", "2"],
                                env=ENV, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not (m := re.search(r"snapshot done: (\d+) rows in ([\d.]+)s", log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"relay of {name} did not take its snapshot:\n{log.read_text()}")
        time.sleep(0.1)
    return proc, int(m.group(1)) / max(float(m.group(2)), 1e-6)


def _wait_done(name: str, timeout: float = 900) -> dict:
    with ClusterStore(ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], CLUSTER) as store:
        deadline = time.monotonic() + timeout
        while True:
            data, _ = store.get_snapshot_request(name)
            if data and data["state"] == "done":
                return store.get_relay_record(name, "online_snapshot") or {}
            if time.monotonic() > deadline:
                raise SystemExit(f"online snapshot of {name} not done in {timeout}s: {data}")
            time.sleep(0.1)


def _latency(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {"samples": 0}
    return {"samples": len(values), **{f"p{q}_ms": round(percentile(values, q), 1) for q in (50, 99)},
            "max_ms": round(values[-1], 1)}


def measure(rows: int, tps: int, seconds: int, chunk_size: int, backend: str) -> dict:
    """The JSON result (module docstring)."""
    cur = prepare()
    name = unique("onl")
    cur.execute(f"CREATE TABLE bench_relay.{name}_big (id int PRIMARY KEY, n int, s text)")
    cur.execute(f"INSERT INTO bench_relay.{name}_big SELECT g, g, repeat('x', 100) FROM generate_series(1, %s) g",
                (rows,))
    cur.execute(f"ANALYZE bench_relay.{name}_big")
    cur.execute(f"CREATE TABLE bench_relay.{name}_lat (id bigserial PRIMARY KEY, ts timestamptz)")
    tables = [{"schema": "bench_relay", "name": f"{name}_big"}, {"schema": "bench_relay", "name": f"{name}_lat"}]
    pgshovel("set", "create", name, str(write_config(name, tables, backend, "json")))
    script = WORK / f"{name}.sql"
    script.write_text(f"INSERT INTO bench_relay.{name}_lat (ts) VALUES (clock_timestamp());\n")
    proc, initial_rate = _relay(name)
    arrivals = Arrivals(names.table_topic(name, "bench_relay", f"{name}_lat"), 1)
    arrivals.start()
    try:
        bench = threading.Thread(target=subprocess.run, args=([
            str(PG_BIN / "pgbench"), "-n", "-c", "2", "-j", "1", "--rate", str(tps), "-T", str(seconds), "-f",
            str(script), "-h", "127.0.0.1", "-p", PG_PORT, "-U", "postgres", "pgshovel"],),
            kwargs={"check": True, "capture_output": True})
        bench.start()
        time.sleep(seconds / 2)
        requested = time.time()
        pgshovel("set", "snapshot", name, "--table", f"bench_relay.{name}_big", "--chunk-size", str(chunk_size))
        stats = _wait_done(name)
        done = time.time()
        bench.join()
        time.sleep(2)
    finally:
        arrivals.stop.set()
        arrivals.join(30)
        proc.terminate()
        proc.wait(60)
    before = [ms for at, ms, _ in arrivals.latencies if at < requested and at - arrivals_start(arrivals) > 2]
    during = [ms for at, ms, _ in arrivals.latencies if requested <= at <= done]
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE bench_relay.{name}_lat, bench_relay.{name}_big")
    return {"backend": backend, "rows": rows, "chunk_size": chunk_size, "tps": tps,
            "initial_snapshot_rows_per_s": round(initial_rate),
            "online_snapshot_rows_per_s": round(stats.get("rows", 0) / max(done - requested, 1e-6)),
            "online_snapshot_rows": stats.get("rows"), "online_snapshot_chunks": stats.get("chunks"),
            "online_snapshot_left_to_stream": stats.get("dropped"),
            "online_snapshot_seconds": round(done - requested, 1),
            "latency_before": _latency(before), "latency_during_online_snapshot": _latency(during)}


def arrivals_start(arrivals: Arrivals) -> float:
    """Arrival time of the first message (s since the epoch), or now."""
    return arrivals.latencies[0][0] if arrivals.latencies else time.time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--tps", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--backend", choices=("trigger", "logical", "pgoutput"), default="trigger")
    args = parser.parse_args()
    print(json.dumps(measure(args.rows, args.tps, args.seconds, args.chunk_size, args.backend), indent=2))


if __name__ == "__main__":
    main()
