"""Relay memory and drain rate of one huge transaction through decoder pgoutput, streamed before
its commit (the relay spills it to a file and replays it at the commit) in 64kB pieces and in
pieces of the server's logical_decoding_work_mem, and not streamed (the walsender's
logical_decoding_work_mem at 4GB: PostgreSQL keeps it and sends it after the commit).

Per mode: a pgoutput set on a new table, its relay started (the slot is created), then one
INSERT of ``rows`` rows (id, n, 100-byte text) committed; peak RSS of the relay (VmHWM, sampled
every 50 ms), RSS before the insert, seconds from the commit until the slot confirmed a
heartbeat after it (drain), the slot's stream_txns and the messages in Kafka (read_committed).

    .venv/bin/python -m bench.experiments.pgoutput_stream [--rows 1000000]

Prints JSON (also saved as bench/results/pgoutput_stream-<time>.json).
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
    WORK,
    create_set,
    drop_set,
    prepare,
    relay_running,
    save_result,
    topic,
    unique,
)
from pgshovel2.backends.logical import wait_caught_up
from pgshovel2.ops.verify import read_topics
from pgshovel2.setrecord import slot_name

# mode -> the relay's walsender logical_decoding_work_mem: streamed in 64kB pieces; streamed in
# pieces of the server's default (64MB); not streamed (4GB: the server keeps it and sends it after
# its commit, as with protocol 1)
MODES = {"streamed_64kB": "64kB", "streamed_server_default": None, "not_streamed_4GB": "4GB"}


def status_mib(pid: int, field: str) -> float:
    """A /proc/<pid>/status field in MiB (VmHWM, VmRSS); 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def measure(cur, mode: str, rows: int) -> dict:
    """One mode's numbers (module docstring); raises SystemExit if a message is missing."""
    name = unique("strm")
    create_set(cur, name, columns="id int PRIMARY KEY, n int, s text", backend="pgoutput")
    spill = WORK / f"{name}-spill"
    spill.mkdir(parents=True, exist_ok=True)
    work_mem = ("--logical-decoding-work-mem", MODES[mode]) if MODES[mode] else ()
    with relay_running(name, "--spill-dir", str(spill), *work_mem) as (proc, log):
        rss_before = status_mib(proc.pid, "VmRSS")
        peak, done = [status_mib(proc.pid, "VmHWM")], threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak.append(status_mib(proc.pid, "VmHWM"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100) FROM generate_series(1, %s) g",
                    (rows,))
        committed = time.monotonic()
        wait_caught_up(DSN, slot_name(CLUSTER, name), timeout=3600)
        drain_s = time.monotonic() - committed
        peak.append(status_mib(proc.pid, "VmHWM"))
        done.set()
        sampler.join()
        replayed = "replaying streamed transaction" in log.read_text()
    cur.execute("SELECT stream_txns, spill_txns FROM pg_stat_replication_slots WHERE slot_name = %s",
                (slot_name(CLUSTER, name),))
    stream_txns, server_spill_txns = cur.fetchone() or (None, None)
    messages = sum(len(p) for p in read_topics(BOOTSTRAP, [topic(name)], timeout=300).values())
    drop_set(cur, name)
    if messages != rows:
        raise SystemExit(f"{mode}: expected {rows} messages in {topic(name)}, found {messages}")
    return {"rows": rows, "messages_in_kafka": messages, "relay_rss_before_mib": round(rss_before, 1),
            "relay_peak_rss_mib": round(max(peak), 1), "drain_s": round(drain_s, 1),
            "drain_changes_per_s": round(rows / drain_s), "stream_txns": stream_txns,
            "server_spill_txns": server_spill_txns, "relay_replayed_a_spill_file": replayed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows
    cur = prepare()
    result = {mode: measure(cur, mode, rows) for mode in MODES}
    save_result("pgoutput_stream", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
