"""pgshovel2 against Debezium (bench/peer/connect.py) in the same run, on the same database, broker and
tables (bench/peer/workloads.py: ``narrow`` and ``mixed``):

- drain: changes/s of N inserts written (5,000 per source transaction; and ``mixed_small``: at
  most 400,000 mixed rows two per source transaction, DRAINS; then vacuumed and checkpointed,
  workloads.fill) before the tool streams them:
  pgshovel2's set (logical through our plugin and through pgoutput, trigger; JSON and Avro; row
  and debezium envelopes; exactly-once, the relay's default) has its position taken by a first
  relay start, Debezium's slot is created before the inserts; both then drain the same N changes
  from the WAL (trigger: from its queue). The clock runs from the tool being ready (the relay's
  ready line; the connector's slot in use) until a read_committed consumer counted N messages on
  the table's topic (kcat, bench/peer/counter.py). Debezium: JSON converter with schemas, at-least-once and
  exactly-once;
- CPU per change of the tool's process (relay; the Connect JVM) and of the Kafka broker over the
  same window (utime + stime, /proc/<pid>/stat), in µs;
- latency p50/p99 at a steady pgbench rate (bench/peer/latency.py's method: commit time in the row
  against arrival at a read_committed consumer);
- pgbench -N tps kept while each tool streams the pgbench tables (bench/peer/debezium_tps.py), rounds
  interleaved with a run without capture (none) (bench/peer/logical.py's rounds for none and
  pgshovel2): of none's median, and
  against Debezium's in the same round; and what each pgbench transaction cost the host's CPUs
  (all processes: pgbench and its backends, the tool, its walsender or sessions, the broker) and
  the database's share of it (without pgbench, the tool's process and the broker).

Debezium is measured warm, as a long-running connector is: every new worker first drains WARMUP
changes uncounted of each table and transaction size it will drain (the JIT compiles what that
drain runs), and drains run in DRAINS' order: 2-row transactions of the mixed table drained at
18-25k changes/s on a worker warmed on narrow rows alone, 26k after 20k of their own, 33k after
the 1M-row mixed drain (2026-12-05; so ``--drains mixed_small`` alone understates Debezium);
before the latency clock starts a first row has streamed end to end; the tps
round follows an uncounted pgbench run of a third of its length.

    .venv/bin/python -m bench.peer.debezium [--changes 100000] [--rounds 1] [--seconds 10] [--variants quick]
        [--only drain,latency,tps] [--drains narrow,mixed,mixed_small]
"""

import argparse
import json
import re
import statistics
import time

from bench.peer import connect, latency, leftovers, workloads
from bench.peer.capture_overhead import pgbench
from bench.peer.common import (
    LOGICAL,
    WORK,
    cpu_pressure,
    pgshovel,
    prepare,
    relay_allocator,
    save_result,
    summary,
    unique,
    write_config,
)
from bench.peer.common import topic as set_topic
from bench.peer.connect import DEBEZIUM
from bench.peer.counter import Counter
from bench.peer.debezium_report import plot, table
from bench.peer.debezium_tps import measure_tps
from bench.peer.logical import Relay, cpu_seconds, helper_pids

PGSHOVEL2 = [(b, e, env) for b in ("logical", "pgoutput", "trigger") for e in ("json", "avro")
             for env in ("row", "debezium")]
QUICK = [("logical", "json", "row"), ("logical", "avro", "row"), ("logical", "json", "debezium"),
         ("pgoutput", "json", "row"), ("trigger", "json", "row"), ("trigger", "avro", "row")]
# changes of a first Debezium drain of each drain's table and transaction size on each new worker,
# not counted
WARMUP = 20_000
SMALL_CHANGES = 400_000  # at most, of the drain in small transactions (pgshovel2 drains it in 3-5 s)
# drain name -> (workload, rows per source transaction, most changes): the bulk loads of 5,000 rows
# a transaction, and the mixed rows in transactions of two, as an OLTP primary writes them (the
# cost per source transaction: BEGIN/END records, positions, acknowledgements)
DRAINS = {"narrow": (workloads.NARROW, 5000, None), "mixed": (workloads.MIXED, 5000, None),
          "mixed_small": (workloads.MIXED, 2, SMALL_CHANGES)}


def drain_changes(changes: int, most: int | None) -> int:
    """Changes a drain of DRAINS writes: changes, or its most when that is fewer."""
    return min(changes, most or changes)


def variant_name(backend: str, encoding: str, envelope: str) -> str:
    return f"{backend}/{encoding}/{envelope}"


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {k: cpu_seconds(p) for k, p in pids.items()}


def figures(changes: int, started: float, counter: Counter, cpu_before: dict, pids: dict) -> dict:
    """{"rate", "<process>_us"}: changes/s and CPU µs per change of each process since started."""
    used = {k: cpu_seconds(p) - cpu_before[k] for k, p in pids.items()}
    return {"rate": changes / (counter.finished_at - started),
            **{f"{k}_us": v * 1e6 / changes for k, v in used.items()}}


def create_variant_set(cur, workload: workloads.Workload, variant: tuple[str, str, str], prefix: str
                       ) -> tuple[str, str]:
    """(set name, table): a new table of workload in schema bench_relay and a pgshovel2 set of
    variant (backend, encoding, envelope) on it."""
    backend, encoding, envelope = variant
    name = unique(prefix)
    table = f"bench_relay.{name}"
    cur.execute(f"CREATE TABLE {table} ({workload.columns})")
    if backend in LOGICAL and (envelope == "debezium" or encoding == "avro"):
        # what set create demands of these (before-images; NOT NULL TOASTable columns in Avro); it
        # changes nothing in the WAL of inserts
        cur.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    config = write_config(name, [{"schema": "bench_relay", "name": name}], backend, encoding, envelope=envelope)
    pgshovel("set", "create", name, str(config))
    return name, table


def drain_pgshovel2(cur, workload: workloads.Workload, variant: tuple[str, str, str], changes: int,
                    per_transaction: int = 5000) -> dict:
    """One drain of a pgshovel2 set of variant (backend, encoding, envelope)."""
    name, table = create_variant_set(cur, workload, variant, "vs")
    try:
        Relay(name, "--skip-snapshot").stop()  # logical: creates the slot; both: position committed
        workloads.fill(cur, workload, table, changes, per_transaction)
        counter = Counter(set_topic(name), changes)
        counter.start()
        relay = Relay(name)
        pids = {"tool": relay.proc.pid, **helper_pids(cur, None, None)}
        started, before = time.monotonic(), cpu_of(pids)
        try:
            counter.wait()
            return figures(changes, started, counter, before, pids)
        finally:
            relay.stop()
    finally:
        pgshovel("set", "drop", name)
        cur.execute(f"DROP TABLE {table}")
        # a full run writes 1M rows per variant
        connect.delete_topics([set_topic(name), f"{name}.transactions", f"{name}.positions"])


def drain_debezium(cur, worker: connect.Worker, workload: workloads.Workload, changes: int,
                   exactly_once: bool, per_transaction: int = 5000) -> dict:
    """One drain of Debezium's connector (on worker) of changes pre-written inserts."""
    name = unique("dbz")
    table = f"bench_relay.{name}"
    cur.execute(f"CREATE TABLE {table} ({workload.columns})")
    connector = connect.Connector(name, [table], exactly_once)
    try:
        workloads.fill(cur, workload, table, changes, per_transaction)
        counter = Counter(connector.topic(table), changes)
        counter.start()
        connector.start(worker)
        pids = {"tool": worker.pid, **helper_pids(cur, None, None)}
        started, before = time.monotonic(), cpu_of(pids)
        counter.wait()
        return figures(changes, started, counter, before, pids)
    finally:
        connector.drop()
        cur.execute(f"DROP TABLE {table}")


def measure_drain(changes: int, rounds: int, variants: list[tuple[str, str, str]],
                  drains: list[str] | None = None) -> dict:
    """{drain (DRAINS, or those named in drains): {variant: {"rate"|"tool_us"|"kafka_us": summary}}}
    over rounds, interleaved."""
    cur = prepare()
    chosen = {w: DRAINS[w] for w in DRAINS if w in (drains or DRAINS)}
    runs: dict[str, dict[str, list[dict]]] = {w: {} for w in chosen}
    for round_no in range(rounds):
        for variant, exactly_once in DEBEZIUM.items():
            worker = connect.Worker(exactly_once)
            try:
                for workload, per, _ in dict.fromkeys(chosen.values()):  # JIT warm-up on what it will drain
                    drain_debezium(cur, worker, workload, min(changes, WARMUP), exactly_once, per)
                for w, (workload, per, most) in chosen.items():
                    got = drain_debezium(cur, worker, workload, drain_changes(changes, most), exactly_once, per)
                    runs[w].setdefault(variant, []).append(got)
                    print(f"  round {round_no + 1} {w} {variant}: {fmt(got)}", flush=True)
            finally:
                worker.stop()
        for w, (workload, per, most) in chosen.items():
            for v in variants:
                got = drain_pgshovel2(cur, workload, v, drain_changes(changes, most), per)
                runs[w].setdefault(variant_name(*v), []).append(got)
                print(f"  round {round_no + 1} {w} {variant_name(*v)}: {fmt(got)}", flush=True)
    return {w: {v: {k: summary([r[k] for r in rs]) for k in rs[0]} for v, rs in per.items()}
            for w, per in runs.items()}


def fmt(got: dict) -> str:
    return ", ".join(f"{k} {v:,.1f}" for k, v in got.items())


def stream_at_rate(connector: connect.Connector, table: str, tps: int, seconds: int) -> tuple[list, float, str]:
    """(arrivals [(epoch s, latency ms, in Kafka ms)], start epoch s, pgbench output) of pgbench inserting rows of
    clock_timestamp() into table at tps for seconds while connector streams it."""
    script = WORK / f"{connector.name}.sql"
    script.write_text(f"INSERT INTO {table} (ts) VALUES (clock_timestamp());\n")
    arrivals = latency.Arrivals(connector.topic(table), 1, lambda v: json.loads(v)["payload"]["after"]["ts"])
    arrivals.start()
    try:
        started = time.time()
        out = pgbench("-n", "-c", "4", "-j", "2", "--rate", str(tps), "-T", str(seconds), "-f", str(script))
        counter = Counter(connector.topic(table), 1 + int(re.search(r"processed: (\d+)", out).group(1)))
        counter.start()
        counter.wait(300)
        time.sleep(1)
    finally:
        arrivals.stop.set()
        arrivals.join(30)
    return arrivals.latencies, started, out


def latency_debezium(tps: int, seconds: int, exactly_once: bool, warmup: float) -> dict:
    """Debezium's commit-to-read_committed latency at a steady pgbench rate (bench/peer/latency.py's method),
    the first warmup seconds not counted; a fresh worker, warmed by a drain of WARMUP changes and
    streaming a first row end to end before pgbench starts."""
    cur = prepare()
    name = unique("dbzlat")
    table = f"bench_relay.{name}"
    cur.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, ts timestamptz)")
    worker = connect.Worker(exactly_once)
    try:
        drain_debezium(cur, worker, workloads.NARROW, WARMUP, exactly_once)  # JIT warm-up, as before a drain
        connector = connect.Connector(name, [table], exactly_once)
        try:
            connector.start(worker)
            cur.execute(f"INSERT INTO {table} (ts) VALUES (clock_timestamp())")
            first = Counter(connector.topic(table), 1)  # streaming end to end before the clock starts
            first.start()
            first.wait(120)
            with cpu_pressure(host := {}):
                arrived, started, out = stream_at_rate(connector, table, tps, seconds)
        finally:
            connector.drop()
    finally:
        worker.stop()
        cur.execute(f"DROP TABLE {table}")
    return latency.figures(tps, out, [a for a in arrived if a[0] - started > warmup], host)


def measure_latency(tps: int, seconds: int, rounds: int = 1) -> dict:
    """{variant: latency figures, each the median over rounds, with "runs" (every round's)}: Debezium
    at-least-once and exactly-once, pgshovel2's backends (exactly-once, JSON, row envelope), rounds
    interleaved; the first third of each run is warm-up (JIT, caches). One 30 s run's p99 varies by
    2x on this host, so a single round is no figure to compare."""
    warmup = seconds / 3
    runs: dict[str, list[dict]] = {v: [] for v in (*DEBEZIUM, "logical", "pgoutput", "trigger")}
    for round_no in range(rounds):
        for v in runs:
            lat = (latency_debezium(tps, seconds, DEBEZIUM[v], warmup) if v in DEBEZIUM
                   else latency.measure(tps, seconds, backend=v, warmup=warmup))
            runs[v].append(lat)
            print(f"  round {round_no + 1} latency {v}: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms (after "
                  f"the producer's timestamp: p50 {lat['kafka_p50_ms']}, p99 {lat['kafka_p99_ms']}) "
                  f"at {lat['tps']:,.0f} tps, CPU pressure {lat['cpu_pressure']:.0%}", flush=True)
    return {v: {**{k: statistics.median(r[k] for r in rs) for k in rs[0]}, "runs": rs} for v, rs in runs.items()}


SECTIONS = ("drain", "latency", "tps")


def measure(changes: int, rounds: int, seconds: int, tps: int = 2000, scale: int = 10,
            variants: list[tuple[str, str, str]] = PGSHOVEL2, sections: tuple[str, ...] = SECTIONS,
            drains: list[str] | None = None) -> dict:
    """{"settings", "drain", "latency", "tps"}: the figures of the module docstring; only the
    figures of sections (SECTIONS), the drains named in drains (DRAINS; None: all)."""
    result: dict = {"settings": {"at_least_once": connect.settings(False), "exactly_once": connect.settings(True),
                                 "changes": changes, "rounds": rounds, "pgbench_seconds": seconds,
                                 "latency_tps": tps, "debezium_warmup_changes": WARMUP,
                                 "pgshovel2_variants": [variant_name(*v) for v in variants],
                                 "pgshovel2_allocator": relay_allocator(),
                                 "workloads": {w.name: w.columns for w in workloads.WORKLOADS.values()},
                                 "drains": {d: {"workload": w.name, "rows_per_transaction": per,
                                                "changes": drain_changes(changes, most)}
                                            for d, (w, per, most) in DRAINS.items()
                                            if d in (drains or DRAINS)},
                                 "sections": list(sections)}}
    if "drain" in sections:
        print("  drain ...", flush=True)
        result["drain"] = measure_drain(changes, rounds, variants, drains)
    if "latency" in sections:
        print("  latency ...", flush=True)
        result["latency"] = measure_latency(tps, seconds, rounds)
    if "tps" in sections:
        print("  pgbench tps kept ...", flush=True)
        result["tps"] = measure_tps(rounds, seconds, scale)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--variants", choices=["all", "quick"], default="all",
                        help="pgshovel2's variants: all 12, or the 6 of make bench QUICK=1")
    parser.add_argument("--only", type=lambda s: tuple(s.split(",")), default=SECTIONS,
                        help=f"comma-separated figures to measure alone: {','.join(SECTIONS)}")
    parser.add_argument("--drains", type=lambda s: s.split(","), default=None,
                        help=f"comma-separated drains to measure alone: {','.join(DRAINS)}")
    args = parser.parse_args()
    unknown = sorted(set(args.only) - set(SECTIONS)) + sorted(set(args.drains or ()) - set(DRAINS))
    if unknown:
        parser.error(f"no such figure or drain: {', '.join(unknown)}")
    variants = PGSHOVEL2 if args.variants == "all" else QUICK
    leftovers.clear_and_say()
    result = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **measure(args.changes, args.rounds, args.seconds, variants=variants, sections=args.only,
                        drains=args.drains)}
    path = save_result("debezium", result)
    print("\n".join(table(result)))
    plots = plot(result, path.with_suffix(""))
    print(f"results: {path} and {len(plots)} plots beside it")


if __name__ == "__main__":
    main()
