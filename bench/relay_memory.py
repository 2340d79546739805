"""Relay memory during one huge source transaction: a single INSERT of
``rows`` rows queued while no relay runs, then relayed (Kafka transactions
split inside it); peak RSS of the relay process (VmHWM) and the message count
in Kafka (read_committed).

    .venv/bin/python -m bench.relay_memory [--rows 1000000]
"""

import argparse
import json
import time
from pathlib import Path

from bench.common import BOOTSTRAP, DSN, create_set, drop_set, prepare, relay_running, topic, unique
from pgshovel2.backends.trigger import wait_caught_up
from pgshovel2.errors import RelayError
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


def measure(rows: int) -> dict:
    """{"rows", "messages_in_kafka", "peak_rss_mib", "relay_s", "changes_per_s"}; raises if a message is missing."""
    cur = prepare()
    name = unique("mem")
    queue = create_set(cur, name)
    cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100) FROM generate_series(1, %s) g",
                (rows,))
    with relay_running(name) as (proc, log):
        peak, started = 0.0, time.monotonic()
        while True:
            peak = max(peak, peak_rss_mib(proc.pid))
            try:
                wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=0.5)
                break
            except RelayError:
                if proc.poll() is not None:
                    raise SystemExit(f"relay died:\n{log.read_text()}") from None
        relay_s = time.monotonic() - started
        peak = max(peak, peak_rss_mib(proc.pid))
    messages = sum(len(p) for p in read_topics(BOOTSTRAP, [topic(name)], timeout=120).values())
    drop_set(cur, name)
    if messages != rows:
        raise SystemExit(f"expected {rows} messages in {topic(name)}, found {messages}")
    return {"rows": rows, "messages_in_kafka": messages, "peak_rss_mib": round(peak, 1),
            "relay_s": round(relay_s, 1), "changes_per_s": round(rows / relay_s)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    print(json.dumps(measure(parser.parse_args().rows), indent=2))


if __name__ == "__main__":
    main()
