"""`make bench`: every figure of GOALS.md that can be measured so far, each
beside its reference from the same run; results in bench/results/<time>.json,
one PNG per figure, and a table on stdout.

    .venv/bin/python -m bench.peer.run [--quick] [--only debezium,relay,...]

--quick keeps 3 runs per figure but shortens each (the whole run in a few
minutes); --only runs the named sections alone. Each section's wall time is in
the result (section_seconds); until the run ends, the sections done so far are
in bench/results/<time>.unfinished.json. The section ``debezium``
(bench/peer/debezium.py) measures pgshovel2 beside Debezium in the same run and
prints every figure as a ratio to Debezium's. The section ``iceberg``
(bench/peer/iceberg.py: the Spark standalone cluster's bootstrap and Iceberg
materialize) takes 15-25 minutes, so only ``--only iceberg`` runs it.
"""

import argparse
import json
import time

from bench.peer import (
    bootstrap,
    capacity,
    capture_overhead,
    debezium,
    debezium_report,
    iceberg,
    latency,
    leftovers,
    logical,
    plot,
    profile,
    relay_memory,
    relay_throughput,
    replica,
    value_memory,
)
from bench.peer.common import RESULTS

FULL = {"capture": (3, 15, 10), "relay": (1_000_000, 3), "latency": (2000, 30), "memory": 1_000_000,
        "values": ((10, 50), value_memory.BACKENDS, ("json", "avro")),
        "profile": 300_000, "bootstrap": (50, 1), "replica": (100_000, 10), "logical": (3, 15, 10, 1_000_000),
        "debezium": (1_000_000, 3, 60, debezium.PGSHOVEL2), "iceberg": (10, 1, 100, 180, 5), "capacity": (1000, 20)}
QUICK = {"capture": (3, 5, 10), "relay": (100_000, 3), "latency": (2000, 10), "memory": 200_000,
         "values": ((10,), value_memory.BACKENDS, ("json",)),
         "profile": 100_000, "bootstrap": (5, 1), "replica": (20_000, 10), "logical": (3, 5, 10, 100_000),
         "debezium": (100_000, 1, 15, debezium.QUICK), "iceberg": (2, 1, 100, 60, 5), "capacity": (1000, 5)}
# section -> (progress line, function of its parameters), in the order they run: Debezium's comparison
# (the longest section) first, so a run stopped midway has it
SECTIONS = {
    "debezium": ("pgshovel2 vs Debezium (drain, CPU, latency, tps kept)",
                 lambda changes, rounds, seconds, variants: debezium.measure(changes, rounds, seconds,
                                                                             variants=variants)),
    "capture": ("capture overhead", capture_overhead.measure),
    "relay": ("relay throughput", relay_throughput.measure),
    "latency": ("end-to-end latency", latency.measure),
    "memory": ("relay memory", relay_memory.measure),
    "values": ("relay memory under one large value", value_memory.measure),
    "bootstrap": ("bootstrap (Spark vs COPY)", bootstrap.measure),
    "replica": ("replica apply vs relay", replica.measure),
    "profile": ("profile", profile.measure),
    "logical": ("logical backend (tps, drain, plugin cost)", logical.measure),
    "capacity": ("capacity per set (docs/capacity.rst)", capacity.measure),
    "iceberg": ("Spark cluster: bootstrap vs COPY, Iceberg materialize changes/s and lag", iceberg.measure),
}
OPTIONAL = {"iceberg"}  # 15-25 min on 2 cores: only with --only


def table(result: dict) -> list[str]:
    """The human summary: figure, measured, reference/ratio, goal."""
    cap, rel, lat, mem = result["capture"], result["relay"], result["latency"], result["memory"]
    lines = [f"{'figure':<44} {'median':>12} {'min..max':>21}  vs reference / goal"]

    def row(label: str, s: dict, note: str) -> None:
        lines.append(f"{label:<44} {s['median']:>12,.0f} {s['min']:>10,.0f}..{s['max']:<10,.0f} {note}")

    for v in ("none", "jsontriga", "pgshovel2"):
        row(f"capture tps, {v}", cap[v], f"{cap['ratio_to_none'][v]:.3f} of none (goal >= 0.90)")
    for enc in ("avro", "json"):
        for mode in ("transactions", "idempotent-only"):
            row(f"relay changes/s, {enc}, {mode}", rel[f"{enc}/{mode}"],
                f"{rel[f'{enc}/{mode}']['median'] / rel[f'{enc}/ceiling']['median']:.3f} of ceiling "
                "(goal >= 100k/s and >= 0.50)")
        row(f"librdkafka ceiling msgs/s, {enc}", rel[f"{enc}/ceiling"], "reference")
        lines.append(f"{'transactions / idempotent-only, ' + enc:<44} "
                     f"{rel[f'{enc}/ratio_transactions_to_idempotent']:>12.3f}")
    label = f"latency ms at {lat['tps_target']} tps (p50/p95/p99/max)"
    lines.append(f"{label:<44} "
                 f"{lat['p50_ms']}/{lat['p95_ms']}/{lat['p99_ms']}/{lat['max_ms']} (goal p99 <= 100)")
    label = f"relay peak RSS MiB, {mem['rows']}-row transaction"
    lines.append(f"{label:<44} {mem['peak_rss_mib']:>12}")
    if "values" in result:
        label = "relay RSS over baseline / largest value"
        lines.append(f"{label:<44} {result['values']['worst_ratio']:>12} (goal <= 2)")
    lines.extend(bootstrap.lines(result["bootstrap"]))
    rep = result["replica"]
    lines.append(f"{'replica apply changes/s, batched / one each':<44} {rep['apply_batched']:>12,.0f} "
                 f"{rep['apply_unbatched']:>10,.0f}  {rep['ratio_batched_to_relay']:.3f} of the relay's "
                 f"{rep['relay']:,.0f}")
    lines += logical.table(result["logical"])
    lines.append(f"profile: top own time {result['profile']['self'][:3]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated sections to run alone: " + ",".join(SECTIONS))
    args = parser.parse_args()
    p = QUICK if args.quick else FULL
    only = args.only.split(",") if args.only else [s for s in SECTIONS if s not in OPTIONAL]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    leftovers.clear_and_say()
    started = time.monotonic()
    result: dict = {"quick": args.quick, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "section_seconds": {}}
    prefix = "-".join(only) + "-" if args.only else ""  # a partial run is named by its sections
    # the sections done so far, rewritten after each: a run stopped midway keeps them
    unfinished = RESULTS / (prefix + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".unfinished.json")
    for name in only:
        label, function = SECTIONS[name]
        print(f"{label} ...", flush=True)
        params, began = p[name], time.monotonic()
        result[name] = function(*params) if isinstance(params, tuple) else function(params)
        result["section_seconds"][name] = round(time.monotonic() - began)
        unfinished.write_text(json.dumps(result, indent=2))
    result["seconds"] = round(time.monotonic() - started)
    stem = RESULTS / (prefix + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    unfinished.unlink()
    pngs = plot.plot(result, stem)
    lines = table(result) if set(SECTIONS) - {"debezium"} - OPTIONAL <= set(only) else []
    if "debezium" in result:
        pngs += debezium_report.plot(result["debezium"], stem)
        lines += debezium_report.table(result["debezium"])
    if "iceberg" in result:
        lines += iceberg.lines(result["iceberg"])
    if "capacity" in result:
        lines += capacity.lines(result["capacity"])
    print("\n".join(lines))
    print(f"results: {stem.with_suffix('.json')}; plots: {', '.join(p.name for p in pngs)}")


if __name__ == "__main__":
    main()
