"""Relay memory during one huge source transaction: a single INSERT of
``--rows`` rows (1M by default) queued while no relay runs, then relayed with
Kafka transactions split inside it; peak RSS of the relay (VmHWM) and the
message count in Kafka (read_committed) are reported.

Usage (local stack up): .venv/bin/python -m bench.relay_memory [--rows 1000000]
Writes bench/results/memory-<UTC time>.json.
"""

import argparse
import json
import subprocess
import time
from pathlib import Path

import yaml

from bench.relay_throughput import BIN, CLUSTER, DSN, ENV, RESULTS, pgshovel, prepare
from pgshovel2 import names
from pgshovel2.relay.pgq_source import wait_caught_up
from pgshovel2.verify import read_topics


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a live process, MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    cur, workdir = prepare()
    name = f"mem{int(time.time())}"
    cur.execute(f"CREATE TABLE bench_relay.{name} (id int PRIMARY KEY, n int, s text)")
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": DSN},
                                      "tables": [{"schema": "bench_relay", "name": name}]}))
    pgshovel("set", "create", name, str(config))
    started = time.monotonic()
    cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100) "
                f"FROM generate_series(1, %s) g", (args.rows,))
    insert_s = time.monotonic() - started
    log = workdir / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "pgshovel-kafka-relay"), name, "--skip-snapshot"],
                                env=ENV, stdout=out, stderr=subprocess.STDOUT)
    peak, started = 0.0, time.monotonic()
    try:
        while True:
            peak = max(peak, peak_rss_mb(proc.pid))
            try:
                wait_caught_up(DSN, f"pgshovel2.{CLUSTER}.{name}", "pgshovel2_relay", timeout=0.5)
                break
            except Exception:
                if proc.poll() is not None:
                    raise SystemExit(f"relay died:\n{log.read_text()}") from None
        relay_s = time.monotonic() - started
        peak = max(peak, peak_rss_mb(proc.pid))
    finally:
        proc.terminate()
        proc.wait(60)
    topic = names.table_topic(name, "bench_relay", name)
    messages = len(read_topics(ENV["PGSHOVEL_BOOTSTRAP_SERVERS"], [topic], timeout=120)[topic])
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE bench_relay.{name}")
    result = {"rows_in_one_source_transaction": args.rows, "messages_in_kafka": messages,
              "relay_peak_rss_mib": round(peak, 1), "insert_s": round(insert_s, 1),
              "relay_s": round(relay_s, 1), "changes_per_s": round(args.rows / relay_s)}
    out = RESULTS / f"memory-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"results: {out}")
    if messages != args.rows:
        raise SystemExit(f"expected {args.rows} messages in {topic}, found {messages}")


if __name__ == "__main__":
    main()
