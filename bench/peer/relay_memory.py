"""Relay memory during one huge source transaction: a single INSERT of
``rows`` rows queued while no relay runs, then relayed (Kafka transactions
split inside it); peak RSS of the relay process (VmHWM) and the message count
in Kafka (read_committed).

    .venv/bin/python -m bench.peer.relay_memory [--rows 1000000] [--backend trigger|logical|pgoutput]

A logical set's relay runs once before the INSERT, to create its replication slot.
"""

import argparse
import json
import threading
import time
from pathlib import Path

from bench.peer.common import (
    BOOTSTRAP,
    CLUSTER,
    DSN,
    ENV,
    LOGICAL,
    create_set,
    drop_set,
    prepare,
    relay_running,
    topic,
    unique,
)
from pgshovel2.backends.trigger import wait_caught_up
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import RelayError
from pgshovel2.ops import status
from pgshovel2.ops.verify import read_topics


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process, MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def _wait_caught_up(name: str, queue: str, backend: str, proc, log: Path) -> float:
    """Wait until the relay relayed everything committed; returns its peak RSS (MiB) meanwhile."""
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], peak_rss_mib(proc.pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        if backend in LOGICAL:  # one heartbeat to wait for: the relay commits one every 10 s when idle
            with ClusterStore(ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], CLUSTER) as store:
                status.wait_caught_up(store, name, BOOTSTRAP, timeout=3600)
        else:
            while True:
                try:
                    wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=0.5)
                    break
                except RelayError:
                    if proc.poll() is not None:
                        raise SystemExit(f"relay died:\n{log.read_text()}") from None
    finally:
        done.set()
        sampler.join()
    return max(peak[0], peak_rss_mib(proc.pid))


def measure(rows: int, backend: str = "trigger") -> dict:
    """{"backend", "rows", "messages_in_kafka", "peak_rss_mib", "relay_s", "changes_per_s"}; raises if a
    message is missing."""
    cur = prepare()
    name = unique("mem")
    queue = create_set(cur, name, backend=backend)
    if backend in LOGICAL:
        with relay_running(name):
            pass
    cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100) FROM generate_series(1, %s) g",
                (rows,))
    ready = "resuming" if backend in LOGICAL else "skipping the initial snapshot"
    with relay_running(name, ready=ready) as (proc, log):
        started = time.monotonic()
        peak = _wait_caught_up(name, queue, backend, proc, log)
        relay_s = time.monotonic() - started
    messages = sum(len(p) for p in read_topics(BOOTSTRAP, [topic(name)], timeout=120).values())
    drop_set(cur, name)
    if messages != rows:
        raise SystemExit(f"expected {rows} messages in {topic(name)}, found {messages}")
    return {"backend": backend, "rows": rows, "messages_in_kafka": messages, "peak_rss_mib": round(peak, 1),
            "relay_s": round(relay_s, 1), "changes_per_s": round(rows / relay_s)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=["trigger", *LOGICAL], default="trigger")
    args = parser.parse_args()
    print(json.dumps(measure(args.rows, args.backend), indent=2))


if __name__ == "__main__":
    main()
