"""End-to-end latency: commit in PostgreSQL to visibility for a read_committed
Kafka consumer, at a steady pgbench rate, relay streaming (trigger backend, or
``--backend logical`` / ``pgoutput``).

Each pgbench transaction is one INSERT of ``clock_timestamp()`` (autocommit,
so the commit follows within microseconds); a consumer thread reads the
topic and takes the time of arrival minus that timestamp (one clock, one
machine). The first two seconds are warm-up and not counted.

    .venv/bin/python -m bench.peer.latency [--tps 2000] [--seconds 30]
"""

import argparse
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import Consumer, TopicPartition

from bench.peer.common import (
    BOOTSTRAP,
    CLUSTER,
    DSN,
    LOGICAL,
    PG_BIN,
    PG_PORT,
    WORK,
    cpu_pressure,
    create_set,
    drop_set,
    prepare,
    relay_running,
    topic,
    unique,
)
from pgshovel2.backends import logical
from pgshovel2.backends.trigger import wait_caught_up
from pgshovel2.setrecord import slot_name


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile q (0..100) of sorted values."""
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))]


class Arrivals(threading.Thread):
    """Reads topic (read_committed) and records arrival time minus the row's ts, in ms, and the
    part of it after the message's producer timestamp (CreateTime: the Kafka transaction's
    commit and the consumer's fetch); ts_of gives the ts column's text of a message value
    (default: pgshovel2's row envelope in JSON)."""

    def __init__(self, topic: str, partitions: int, ts_of: Callable[[bytes], str] = lambda v: json.loads(v)["ts"]):
        super().__init__(daemon=True)
        self.latencies: list[tuple[float, float, float]] = []  # (arrival epoch s, latency ms, in Kafka ms)
        self.stop = threading.Event()
        self.ts_of = ts_of
        # fetch.wait.max.ms left at librdkafka's 500: the broker answers a read_committed fetch as
        # soon as a commit marker moves the last stable offset. 5 ms, as here before, cost the
        # broker about 0.07 of a core in fetches (150/s), which every tool measured here paid for.
        self.consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"bench-latency-{time.time_ns()}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)  # poll returns at once when a message is there (consume() waits)
            if msg is None or msg.error() or msg.value() is None:
                continue
            now = time.time()
            ts = datetime.fromisoformat(self.ts_of(msg.value())).timestamp()
            self.latencies.append((now, (now - ts) * 1000, now * 1000 - msg.timestamp()[1]))
        self.consumer.close()


def measure(tps: int, seconds: int, relay_args: tuple[str, ...] = (), backend: str = "trigger",
            warmup: float = 2) -> dict:
    """{"p50_ms", "p95_ms", "p99_ms", "max_ms", "samples", "tps"} at a steady pgbench --rate tps for
    seconds, the first warmup seconds not counted."""
    cur = prepare()
    name = unique("lat")
    queue = create_set(cur, name, "json", "id bigserial PRIMARY KEY, ts timestamptz", backend)
    script = WORK / f"{name}.sql"
    script.write_text(f"INSERT INTO bench_relay.{name} (ts) VALUES (clock_timestamp());\n")
    with relay_running(name, *relay_args):
        arrivals = Arrivals(topic(name), 3)
        arrivals.start()
        host: dict = {}
        try:
            started = time.time()
            with cpu_pressure(host):
                out = subprocess.run([str(PG_BIN / "pgbench"), "-n", "-c", "4", "-j", "2", "--rate", str(tps),
                                      "-T", str(seconds), "-f", str(script), "-h", "127.0.0.1", "-p", PG_PORT,
                                      "-U", "postgres", "pgshovel"],
                                     check=True, capture_output=True, text=True).stdout
            if backend in LOGICAL:
                logical.wait_caught_up(DSN, slot_name(CLUSTER, name), timeout=300)
            else:
                wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=300)
            time.sleep(1)
        finally:
            arrivals.stop.set()
            arrivals.join(30)
    drop_set(cur, name)
    return figures(tps, out, [a for a in arrivals.latencies if a[0] - started > warmup], host)


def figures(tps: int, out: str, counted: list[tuple[float, float, float]], host: dict) -> dict:
    """A latency run's figures: {"tps_target", "tps" (pgbench's, from its output out), "samples",
    "p50_ms", "p95_ms", "p99_ms", "max_ms", "kafka_p50_ms", "kafka_p99_ms" (the part after the
    producer's timestamp), and host's keys (cpu_pressure)}; counted: Arrivals.latencies after
    the warm-up."""
    values = sorted(ms for _, ms, _ in counted)
    in_kafka = sorted(k for _, _, k in counted)
    return {"tps_target": tps, "tps": float(re.search(r"tps = ([\d.]+)", out).group(1)),
            "samples": len(values), **{f"p{q}_ms": round(percentile(values, q), 1) for q in (50, 95, 99)},
            "max_ms": round(values[-1], 1),
            **{f"kafka_p{q}_ms": round(percentile(in_kafka, q), 1) for q in (50, 99)}, **host}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tps", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--backend", choices=("trigger", *LOGICAL), default="trigger")
    args = parser.parse_args()
    print(json.dumps(measure(args.tps, args.seconds, backend=args.backend), indent=2))


if __name__ == "__main__":
    main()
