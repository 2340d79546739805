"""The native codec against the pure-Python codec, interleaved in one run: changes/s and relay
CPU µs per change draining the same queued inserts of a workload (bench/peer/workloads.py; default
``mixed``), per backend (trigger: the PgQ queue; logical: our plugin's slot) and encoding, with
``PGSHOVEL2_NATIVE=0`` and ``=1`` alternating within each round. ``--profile`` samples each
drain with py-spy instead and prints its top functions (own and total share of samples).

    .venv/bin/python -m bench.experiments.native_ab [--workload mixed] [--changes 200000] [--rounds 2]
        [--backends trigger,logical] [--encodings avro,json] [--envelopes row] [--profile]
"""

import argparse
import json
import signal
import time

from bench.peer import common
from bench.peer.common import WORK, pgshovel, prepare, py_spy, save_result, summary, unique, write_config
from bench.peer.logical import Relay, caught_up, cpu_seconds
from bench.peer.profile import top
from bench.peer.workloads import WORKLOADS, Workload, fill


def drain(cur, workload: Workload, backend: str, encoding: str, envelope: str, native: str, changes: int,
          profile: bool) -> dict:
    """One drain of changes queued rows of workload: {rate, cpu_us} (and the profile's top)."""
    common.ENV["PGSHOVEL2_NATIVE"] = native
    name = unique(f"nab{backend[0]}")
    table = f"bench_relay.{name}"
    cur.execute(f"CREATE TABLE {table} ({workload.columns})")
    if backend != "trigger":  # Avro and NOT NULL TOASTable columns; inserts only, so FULL costs nothing
        cur.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    entry = {"schema": "bench_relay", "name": name}
    config = write_config(name, [entry], backend, encoding)
    if envelope != "row":
        text = config.read_text() + f"envelope: {envelope}\n"
        config.write_text(text)
    pgshovel("set", "create", name, str(config))
    Relay(name, "--skip-snapshot").stop()  # logical: creates the slot; both: position committed
    fill(cur, workload, table, changes)
    relay = Relay(name)
    spy, out = None, WORK / f"profile-native-{name}.txt"
    if profile:
        spy = py_spy(relay.proc.pid, out, 200)
    started, cpu = time.monotonic(), cpu_seconds(relay.proc.pid)
    try:
        caught_up(name, backend)
        result = {"rate": changes / (time.monotonic() - started),
                  "cpu_us": (cpu_seconds(relay.proc.pid) - cpu) * 1e6 / changes}
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        relay.stop()
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE {table}")
    if profile:
        result["profile"] = top(out, 25)
    return result


def measure(args: argparse.Namespace) -> dict:
    """{"<backend>/<encoding>/<envelope>/native=<0|1>": {rate, cpu_us summaries}, ratios, workload}."""
    cur = prepare()
    workload = WORKLOADS[args.workload]
    runs: dict[str, list[dict]] = {}
    for round_no in range(args.rounds):
        for backend in args.backends.split(","):
            for encoding in args.encodings.split(","):
                for envelope in args.envelopes.split(","):
                    for native in ("0", "1"):
                        key = f"{backend}/{encoding}/{envelope}/native={native}"
                        got = drain(cur, workload, backend, encoding, envelope, native, args.changes, args.profile)
                        runs.setdefault(key, []).append(got)
                        print(f"  round {round_no + 1} {key}: {got['rate']:,.0f} changes/s, "
                              f"relay CPU {got['cpu_us']:.1f} µs/change", flush=True)
                        if args.profile:
                            print(json.dumps(got["profile"], indent=1), flush=True)
    out: dict = {}
    for key, got in runs.items():
        out[key] = {"changes_per_s": summary([g["rate"] for g in got]),
                    "cpu_us_per_change": summary([g["cpu_us"] for g in got])}
    for key in [k for k in out if k.endswith("native=1")]:
        base = out[key.replace("native=1", "native=0")]
        out[key]["speedup"] = out[key]["changes_per_s"]["median"] / base["changes_per_s"]["median"]
        out[key]["cpu_ratio"] = out[key]["cpu_us_per_change"]["median"] / base["cpu_us_per_change"]["median"]
    out["workload"] = (f"drain {args.changes} queued inserts of the {workload.name} table (5,000 per source "
                       "transaction), exactly-once; native off/on interleaved")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mixed", choices=sorted(WORKLOADS))
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends", default="trigger,logical")
    parser.add_argument("--encodings", default="avro,json")
    parser.add_argument("--envelopes", default="row")
    parser.add_argument("--profile", action="store_true")
    result = measure(parser.parse_args())
    print(json.dumps(result, indent=2))
    print(save_result("native-ab", result))


if __name__ == "__main__":
    main()
