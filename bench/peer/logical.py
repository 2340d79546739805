"""The logical backend against the trigger backend, in one run:

- capture overhead: pgbench tps (``-N -c 4 -j 2``) with no capture, the trigger backend
  (its set on the pgbench tables; triggers only, and with its relay streaming), REPLICA
  IDENTITY FULL alone (what the logical backend required of these tables before unchanged TOAST
  values were marked, and what the debezium envelope still requires, costs in WAL) and the
  logical backend (its set, REPLICA IDENTITY DEFAULT, its relay streaming; through our plugin and
  through pgoutput), rounds interleaved; a fresh set
  per round, the relay caught up after each; the relay's CPU seconds during pgbench (on this
  2-core machine every CPU second of relay, walsender and Kafka is taken from pgbench);
- relay throughput: changes/s and relay CPU per change of each backend's relay draining the
  same N queued inserts (trigger: from the PgQ queue; logical: from the slot, created by a first
  relay start before the inserts, through our plugin and through pgoutput), Avro, exactly-once;
- the plugin's own cost per change (:mod:`bench.peer.logical_plugin`);
- commit-to-read_committed latency of both backends at 2,000 tps (:mod:`bench.peer.latency`).

    .venv/bin/python -m bench.peer.logical [--rounds 3] [--seconds 15] [--changes 200000]

Result JSON in bench/results/logical-<time>.json and printed.
"""

import argparse
import os
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from bench.peer import latency, logical_plugin
from bench.peer.capture_overhead import pgbench
from bench.peer.common import (
    BIN,
    CLUSTER,
    DSN,
    ENV,
    LOGICAL,
    WORK,
    children_cpu_s,
    dies_with_bench,
    host_busy_s,
    pgshovel,
    prepare,
    save_result,
    summary,
    unique,
    write_config,
)
from pgshovel2.backends.logical import wait_caught_up as slot_caught_up
from pgshovel2.backends.trigger import wait_caught_up as queue_caught_up
from pgshovel2.setrecord import slot_name

PGBENCH = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]
READY = ("skipping the initial snapshot", "resuming slot", "resuming after tick")


class Relay:
    """A relay process of set name, ready (its source open) when constructed."""

    def __init__(self, name: str, *args: str):
        self.log = WORK / f"{name}-{time.time_ns()}.log"
        self.started_at = datetime.now(UTC)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([str(BIN / "pgshovel-kafka-relay"), name, *args], env=ENV,
                                         stdout=out, stderr=subprocess.STDOUT, preexec_fn=dies_with_bench)
        deadline = time.monotonic() + 120
        while not any(m in self.log.read_text() for m in READY):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"relay of {name} did not start:\n{self.log.read_text()}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def caught_up(name: str, backend: str, timeout: float = 3600) -> None:
    """Wait until the set's relay relayed everything committed so far."""
    if backend in LOGICAL:
        slot_caught_up(DSN, slot_name(CLUSTER, name), timeout)
    else:
        queue_caught_up(DSN, f"pgshovel2.{CLUSTER}.{name}", "pgshovel2_relay", timeout)


def identity(cur, tables: list[str], kind: str) -> None:
    for table in tables:
        cur.execute(f"ALTER TABLE {table} REPLICA IDENTITY {kind}")


# variant -> (backend of its set or None, replica identity of the pgbench tables, relay streaming)
VARIANTS = {
    "none": (None, "DEFAULT", False),
    "trigger_capture_only": ("trigger", "DEFAULT", False),
    "trigger": ("trigger", "DEFAULT", True),
    "identity_full_only": (None, "FULL", False),
    "logical": ("logical", "DEFAULT", True),
    "pgoutput": ("pgoutput", "DEFAULT", True),
}
BACKENDS = ("trigger", *LOGICAL)


def cpu_seconds(pid: int | tuple[int, ...]) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat); of a tuple of processes, their sum."""
    if isinstance(pid, tuple):
        return sum(cpu_seconds(p) for p in pid)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def walsender_pid(cur, slot: str, timeout: float = 60) -> int:
    """The pid of the walsender streaming slot, once there is one (it exists once its client
    streams); SystemExit after timeout seconds without."""
    deadline = time.monotonic() + timeout
    while True:
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
        if row and row[0] is not None:
            return row[0]
        if time.monotonic() > deadline:
            raise SystemExit(f"slot {slot}: no walsender streams it after {timeout:.0f} s")
        time.sleep(0.1)


def helper_pids(cur, relay: "Relay | None", logical_set: str | None) -> dict[str, int | tuple[int, ...]]:
    """Processes besides pgbench and the backends it talks to: the relay, the logical set's
    walsender, a trigger set's relay sessions (``relay_db``: its polls, ticks and batch reads;
    the client backends started since the relay, before pgbench starts), and the Kafka broker of
    the stack (STACK_DIR, default the repository's .stack, as scripts/env.sh)."""
    pids: dict[str, int | tuple[int, ...]] = {"relay": relay.proc.pid} if relay else {}
    if relay and not logical_set:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                    "AND pid <> pg_backend_pid() AND backend_start >= %s", (relay.started_at,))
        pids["relay_db"] = tuple(row[0] for row in cur.fetchall())
    if logical_set and relay:
        pids["walsender"] = walsender_pid(cur, slot_name(CLUSTER, logical_set))
    stack_dir = os.environ.get("STACK_DIR", str(Path(__file__).resolve().parents[2] / ".stack"))
    kafka_pid = Path(stack_dir) / "kafka" / "kafka.pid"
    if kafka_pid.exists():
        pids["kafka"] = int(kafka_pid.read_text())
    return pids


@contextmanager
def pgbench_set(cur, variant: str, *relay_args: str) -> Iterator[tuple[str, "Relay | None"]]:
    """The pgbench tables with variant's (VARIANTS) replica identities, in a new set of its backend
    (none for backend None) whose relay streams (started with relay_args) when the variant streams.
    Yields (set name, relay or None); afterwards the relay is stopped, the set dropped and the
    identities reset."""
    backend, ident, streaming = VARIANTS[variant]
    name, relay = unique("tps"), None
    identity(cur, PGBENCH, ident)
    if backend in LOGICAL:  # insert-only and keyless: FULL costs nothing there; pgoutput needs an identity
        identity(cur, ["pgbench_history"], "FULL")
    if backend is not None:
        tables = [{"name": t, "allow_unkeyed": t == "pgbench_history"} for t in PGBENCH]
        pgshovel("set", "create", name, str(write_config(name, tables, backend)))
        if streaming:
            relay = Relay(name, "--skip-snapshot", *relay_args)
    try:
        yield name, relay
    finally:
        if relay is not None:
            relay.stop()
        if backend is not None:
            pgshovel("set", "drop", name)
        identity(cur, PGBENCH, "DEFAULT")


def measured_pgbench(seconds: int, pids: dict[str, int | tuple[int, ...]]) -> tuple[str, dict[str, float]]:
    """(pgbench's output, CPU s during it) of ``pgbench -N -c 4 -j 2 -T seconds``: of each of pids'
    processes by name, "pgbench": of pgbench itself, "host": of the whole host (host_busy_s)."""
    before, host, own = {k: cpu_seconds(p) for k, p in pids.items()}, host_busy_s(), children_cpu_s()
    out = pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(seconds))
    cpu = {k: round(cpu_seconds(p) - before[k], 2) for k, p in pids.items()}
    cpu["pgbench"] = round(children_cpu_s() - own, 2)
    cpu["host"] = round(host_busy_s() - host, 2)
    return out, cpu


def tps_round(cur, variant: str, seconds: int) -> tuple[float, dict[str, float]]:
    """(pgbench tps, CPU seconds during pgbench: of each helper process (helper_pids), of pgbench
    and of the host, measured_pgbench's) of one round of variant."""
    backend = VARIANTS[variant][0]
    with pgbench_set(cur, variant) as (name, relay):
        cur.execute("CHECKPOINT")
        pids = helper_pids(cur, relay, name if backend in LOGICAL else None)
        out, cpu = measured_pgbench(seconds, pids)
        if relay is not None:
            caught_up(name, backend)
    return float(re.search(r"tps = ([\d.]+)", out).group(1)), cpu


def measure_tps(rounds: int, seconds: int, scale: int) -> dict:
    """{variant: summary of tps, ratio_to_none, cpu_s: {variant: {process: median CPU s}}, workload}."""
    pgbench("-i", "-q", "-s", str(scale))
    cur = prepare()
    tps: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for round_no in range(rounds):
        for variant in tps:
            rate, used = tps_round(cur, variant, seconds)
            tps[variant].append(rate)
            cpu[variant].append(used)
            print(f"  round {round_no + 1} {variant}: {rate:,.0f} tps, CPU s {used}", flush=True)
    base = statistics.median(tps["none"])
    return {"workload": f"pgbench -N -c 4 -j 2 -T {seconds}, scale {scale}, interleaved; 2 cores shared with "
                        "the relay and Kafka",
            **{v: summary(t) for v, t in tps.items()},
            "ratio_to_none": {v: statistics.median(t) / base for v, t in tps.items()},
            "cpu_s": {v: {k: statistics.median(r[k] for r in c) for k in c[0]} for v, c in cpu.items()}}


def drain(cur, backend: str, changes: int) -> tuple[float, float]:
    """(changes/s, relay CPU µs per change) of backend's relay draining changes queued inserts
    (5,000 per transaction)."""
    name = unique(f"dr{backend[0]}")
    cur.execute(f"CREATE TABLE bench_relay.{name} (id int PRIMARY KEY, n int, s text)")
    pgshovel("set", "create", name, str(write_config(name, [{"schema": "bench_relay", "name": name}], backend)))
    Relay(name, "--skip-snapshot").stop()  # logical: creates the slot; both: position committed
    for start in range(0, changes, 5000):
        cur.execute(f"INSERT INTO bench_relay.{name} SELECT g, g, repeat('x', 100) FROM generate_series(%s, %s) g",
                    (start + 1, min(start + 5000, changes)))
    relay = Relay(name)
    started, cpu = time.monotonic(), cpu_seconds(relay.proc.pid)
    caught_up(name, backend)
    rate = changes / (time.monotonic() - started)
    cpu_us = (cpu_seconds(relay.proc.pid) - cpu) * 1e6 / changes
    relay.stop()
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE bench_relay.{name}")
    return rate, cpu_us


def measure_drain(changes: int, rounds: int) -> dict:
    """{backend: summary of changes/s, cpu_us: {backend: summary of relay CPU µs per change},
    ratio_logical_to_trigger, ratio_pgoutput_to_logical, workload}."""
    cur = prepare()
    runs: dict[str, list[float]] = {b: [] for b in BACKENDS}
    cpu: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for round_no in range(rounds):
        for backend in runs:
            rate, cpu_us = drain(cur, backend, changes)
            runs[backend].append(rate)
            cpu[backend].append(cpu_us)
            print(f"  round {round_no + 1} drain {backend}: {rate:,.0f} changes/s, relay CPU {cpu_us:.1f} µs/change",
                  flush=True)
    out: dict = {b: summary(r) for b, r in runs.items()}
    out["cpu_us"] = {b: summary(c) for b, c in cpu.items()}
    out["ratio_logical_to_trigger"] = out["logical"]["median"] / out["trigger"]["median"]
    out["ratio_pgoutput_to_logical"] = out["pgoutput"]["median"] / out["logical"]["median"]
    out["workload"] = f"drain {changes} queued inserts (5,000 per source transaction), Avro, exactly-once"
    return out


def table(result: dict) -> list[str]:
    """Human summary lines."""
    lines = [f"{'figure':<40} {'median':>10} {'min..max':>21}  note"]
    for v in VARIANTS:
        s = result["tps"][v]
        lines.append(f"{'pgbench tps, ' + v:<40} {s['median']:>10,.0f} {s['min']:>10,.0f}..{s['max']:<10,.0f} "
                     f"{result['tps']['ratio_to_none'][v]:.3f} of none, CPU s {result['tps']['cpu_s'][v]}")
    for b in BACKENDS:
        s = result["drain"][b]
        label = f"relay drain changes/s, {b}"
        lines.append(f"{label:<40} {s['median']:>10,.0f} {s['min']:>10,.0f}..{s['max']:<10,.0f} "
                     f"relay CPU {result['drain']['cpu_us'][b]['median']:.1f} µs/change")
    lines.append(f"{'drain logical / trigger':<40} {result['drain']['ratio_logical_to_trigger']:>10.3f}")
    lines.append(f"{'drain pgoutput / our plugin':<40} {result['drain']['ratio_pgoutput_to_logical']:>10.3f}")
    for b, lat in result.get("latency", {}).items():
        label = f"latency ms p50/p95/p99/max, {b}"
        lines.append(f"{label:<40} {lat['p50_ms']}/{lat['p95_ms']}/{lat['p99_ms']}/{lat['max_ms']} "
                     f"at {lat['tps']:,.0f} tps")
    for key, s in result["plugin"].items():
        if key.endswith("_us_per_change"):
            lines.append(f"{key:<40} {s['median']:>10.2f} {s['min']:>10.2f}..{s['max']:<10.2f}")
    return lines


def measure(rounds: int, seconds: int, scale: int, changes: int) -> dict:
    """{"plugin", "tps", "drain"}: the three figures of the module docstring."""
    print("  plugin cost ...", flush=True)
    plugin = logical_plugin.measure(changes, rounds)
    print("  capture overhead (pgbench) ...", flush=True)
    tps = measure_tps(rounds, seconds, scale)
    print("  relay drain ...", flush=True)
    drained = measure_drain(changes, rounds)
    print("  latency at 2,000 tps ...", flush=True)
    lat = {b: latency.measure(2000, seconds, backend=b) for b in BACKENDS}
    return {"plugin": plugin, "tps": tps, "drain": drained, "latency": lat}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--changes", type=int, default=200_000)
    args = parser.parse_args()
    result = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **measure(args.rounds, args.seconds, args.scale, args.changes)}
    path = save_result("logical", result)
    print("\n".join(table(result)))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
