"""pgbench -N tps kept while each tool streams the pgbench tables (bench/peer/debezium.py's tps
section): rounds of none (no capture), Debezium at-least-once and exactly-once, and pgshovel2's
backends (bench/peer/logical.py's rounds), interleaved; tps kept against none and against Debezium in
the same round, and CPU per pgbench transaction of the host, the database and the broker.
"""

import re
import statistics

from bench.peer import connect, logical
from bench.peer.capture_overhead import pgbench
from bench.peer.common import prepare, summary, unique
from bench.peer.connect import DEBEZIUM
from bench.peer.logical import PGBENCH, helper_pids, measured_pgbench, walsender_pid


def tps_debezium(cur, seconds: int, exactly_once: bool = False) -> tuple[float, dict[str, float]]:
    """(pgbench -N tps, CPU s meanwhile of Connect, its walsender, Kafka, pgbench and the whole
    host, logical.measured_pgbench's) with Debezium streaming the pgbench tables
    (exactly_once: Connect's exactly-once source support, a Kafka transaction per poll); a first
    pgbench run of seconds / 3, not counted, warms its JVM (a relay has no JIT to warm)."""
    name = unique("dbztps")
    worker = connect.Worker(exactly_once)
    connector = connect.Connector(name, [f"public.{t}" for t in PGBENCH], exactly_once)
    try:
        connector.start(worker)
        pgbench("-N", "-n", "-c", "4", "-j", "2", "-T", str(max(1, seconds // 3)))
        cur.execute("CHECKPOINT")
        pids = {"connect": worker.pid, "walsender": walsender_pid(cur, connector.name),
                **helper_pids(cur, None, None)}
        out, used = measured_pgbench(seconds, pids)
    finally:
        connector.drop()
        worker.stop()
    return float(re.search(r"tps = ([\d.]+)", out).group(1)), used


def measure_tps(rounds: int, seconds: int, scale: int) -> dict:
    """{variant: summary of tps, ratio_to_none, kept_by_round, kept_minus_debezium, cpu_s,
    kafka_us_per_txn, host_us_per_txn, seconds}: none, Debezium (at-least-once and exactly-once),
    and pgshovel2's backends (exactly-once). ratio_to_none: the median tps over none's median;
    kept_by_round: each round's tps over that round's none; kept_minus_debezium: the median over
    rounds of kept_by_round minus Debezium's (at-least-once) in the same round. kafka_us_per_txn:
    the broker's CPU µs per pgbench transaction, each a change to two tables (pgbench_accounts and
    pgbench_history): the median CPU s over the median tps. host_us_per_txn: the median over rounds
    of the host's busy CPU µs (all processes, pgbench's included) per pgbench transaction;
    database_us_per_txn: the same without OFF_DATABASE's processes."""
    pgbench("-i", "-q", "-s", str(scale))
    cur = prepare()
    variants = ["none", *DEBEZIUM, "logical", "pgoutput", "trigger"]
    tps: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[dict]] = {v: [] for v in variants}
    for round_no in range(rounds):
        # every other round in reverse: a variant always run right after the same one (after
        # Debezium's JVM, say) would carry that one's after-effects in every round
        for v in variants[::-1] if round_no % 2 else variants:
            rate, used = (tps_debezium(cur, seconds, DEBEZIUM[v]) if v in DEBEZIUM
                          else logical.tps_round(cur, v, seconds))
            tps[v].append(rate)
            cpu[v].append(used)
            print(f"  round {round_no + 1} pgbench with {v}: {rate:,.0f} tps, CPU s {used}", flush=True)
    return {"workload": f"pgbench -N -c 4 -j 2 -T {seconds}, scale {scale}, interleaved, every other round in reverse",
            "seconds": seconds, **{v: summary(t) for v, t in tps.items()}, **tps_figures(tps, cpu, seconds)}


def tps_figures(tps: dict[str, list[float]], cpu: dict[str, list[dict]], seconds: int) -> dict:
    """measure_tps's figures from its rounds: tps[variant][round], cpu[variant][round] (CPU s by
    process, "pgbench" and "host": measured_pgbench's)."""
    base = statistics.median(tps["none"])
    kept = {v: [rate / none for rate, none in zip(t, tps["none"], strict=True)] for v, t in tps.items()}
    cpu_s = {v: {k: statistics.median(r[k] for r in c) for k in c[0]} if c[0] else {} for v, c in cpu.items()}
    return {"ratio_to_none": {v: statistics.median(t) / base for v, t in tps.items()},
            "kept_by_round": kept,
            "kept_minus_debezium": {v: statistics.median(a - b for a, b in zip(k, kept["debezium"], strict=True))
                                    for v, k in kept.items()},
            "cpu_s": cpu_s,
            "kafka_us_per_txn": {v: used["kafka"] * 1e6 / (statistics.median(tps[v]) * seconds)
                                 for v, used in cpu_s.items() if "kafka" in used},
            "host_us_per_txn": _per_txn(tps, cpu, seconds, lambda r: r["host"]),
            "database_us_per_txn": _per_txn(tps, cpu, seconds,
                                            lambda r: r["host"] - sum(r.get(k, 0.0) for k in OFF_DATABASE))}


# Processes that run off the database host in production: what the host spent besides them is
# PostgreSQL's (backends and their capture triggers, walsender, the relay's sessions), its kernel
# work, and the stack's idle services.
OFF_DATABASE = ("pgbench", "relay", "connect", "kafka")


def _per_txn(tps: dict[str, list[float]], cpu: dict[str, list[dict]], seconds: int, of) -> dict[str, float]:
    """{variant: median over rounds of of(round's CPU s) in µs per pgbench transaction}, for the
    variants whose rounds all measured the host and pgbench (results from before them have none)."""
    return {v: statistics.median(of(r) * 1e6 / (rate * seconds) for r, rate in zip(c, tps[v], strict=True))
            for v, c in cpu.items() if all("host" in r and "pgbench" in r for r in c)}
