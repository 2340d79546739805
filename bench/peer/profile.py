"""Profile of the relay's hot path: py-spy samples the relay (by pid, no
instrumentation) while it drains a pre-filled queue (Avro, Kafka
transactions). Saves the collapsed stacks (``profile-<time>.txt``, for
flamegraph tools) and returns the functions with the most samples, by own
time and by total time.

    .venv/bin/python -m bench.peer.profile [--changes 300000]
"""

import argparse
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from bench.peer.common import BIN, DSN, RESULTS, create_set, drop_set, prepare, relay_running, unique
from bench.peer.relay_throughput import fill
from pgshovel2.backends.trigger import wait_caught_up


def top(collapsed: Path, count: int = 20) -> dict[str, list]:
    """{"self": [(function, share)], "total": [...]} from py-spy's raw (collapsed) output."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";") if f]
        if not frames:
            continue
        samples += int(n)
        own[frames[-1]] += int(n)
        for frame in set(frames):
            total[frame] += int(n)
    share = lambda c: [(f, round(n / samples, 3)) for f, n in c.most_common(count)]  # noqa: E731
    return {"samples": samples, "self": share(own), "total": share(total)}


def measure(changes: int) -> dict:
    """Drain changes under py-spy; returns top() plus the collapsed-stack file's name."""
    cur = prepare()
    name = unique("prof")
    queue = create_set(cur, name)
    fill(cur, f"bench_relay.{name}", changes)
    out = RESULTS / f"profile-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.txt"
    with relay_running(name) as (proc, _):
        spy = subprocess.Popen([str(BIN / "py-spy"), "record", "--pid", str(proc.pid), "--rate", "200",
                                "--format", "raw", "--output", str(out), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            started = time.monotonic()
            wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=3600)
            rate = changes / (time.monotonic() - started)
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
    drop_set(cur, name)
    return {"changes_per_s_under_profiler": round(rate), "collapsed_stacks": out.name, **top(out)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=300_000)
    print(json.dumps(measure(parser.parse_args().changes), indent=2))


if __name__ == "__main__":
    main()
