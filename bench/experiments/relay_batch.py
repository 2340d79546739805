"""How a relay batches its Kafka transactions while draining: changes/s, CPU µs per change of the
relay and of the Kafka broker, and the number of Kafka transactions, for pgshovel2 sets (bench/peer/
debezium.py's drain of pre-written inserts of a workload, default ``mixed``, 5,000 per source
transaction, ``--per-transaction``), plus the commit-to-read_committed latency at a steady rate (bench/peer/latency.py,
logical backend, JSON). Kafka transactions are counted as the committed records of the set's
positions topic (one per Kafka transaction). ``--profile`` samples each drain with py-spy and
adds its top functions (own and total share of samples).

Run it twice in one stack to compare two versions of the relay: the relay processes import
pgshovel2 from PYTHONPATH first (e.g. an exported older commit).

    .venv/bin/python -m bench.experiments.relay_batch [--changes 200000] [--rounds 2] [--variants logical/json/row,...]
        [--per-transaction 5000] [--tps 2000] [--seconds 20] [--profile] [--label before]
"""

import argparse
import json
import signal
import time

from bench.peer import connect, latency, workloads
from bench.peer.common import WORK, pgshovel, prepare, py_spy, save_result, summary
from bench.peer.common import topic as set_topic
from bench.peer.counter import Counter, committed_count
from bench.peer.debezium import cpu_of, create_variant_set, figures
from bench.peer.logical import Relay, helper_pids
from bench.peer.profile import top


def drain(cur, workload: workloads.Workload, variant: tuple[str, str, str], changes: int, profile: bool,
          per_transaction: int = 5000) -> dict:
    """One drain of a pgshovel2 set of variant (backend, encoding, envelope): bench.peer.debezium's
    figures plus ``kafka_txns`` (and ``profile``)."""
    name, table = create_variant_set(cur, workload, variant, "rb")
    positions = f"{name}.positions"
    try:
        Relay(name, "--skip-snapshot").stop()
        before_txns = committed_count(positions)
        workloads.fill(cur, workload, table, changes, per_transaction)
        counter = Counter(set_topic(name), changes)
        counter.start()
        relay = Relay(name)
        spy, out = None, WORK / f"profile-{name}.txt"
        if profile:
            spy = py_spy(relay.proc.pid, out, 250)
        pids = {"tool": relay.proc.pid, **helper_pids(cur, None, None)}
        started, before = time.monotonic(), cpu_of(pids)
        try:
            counter.wait()
            got = figures(changes, started, counter, before, pids)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            relay.stop()
        got["kafka_txns"] = committed_count(positions) - before_txns
        if profile:
            got["profile"] = top(out, 25)
        return got
    finally:
        pgshovel("set", "drop", name)
        cur.execute(f"DROP TABLE {table}")
        connect.delete_topics([set_topic(name), f"{name}.transactions", positions])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mixed", choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default="logical/json/row,logical/avro/row")
    parser.add_argument("--tps", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=20, help="latency run length (0: none)")
    parser.add_argument("--per-transaction", type=int, default=5000, help="rows per source transaction")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    cur = prepare()
    variants = [tuple(v.split("/")) for v in args.variants.split(",")]
    runs: dict[str, list[dict]] = {}
    for round_no in range(args.rounds):
        for v in variants:
            got = drain(cur, workloads.WORKLOADS[args.workload], v, args.changes, args.profile,
                        args.per_transaction)
            runs.setdefault("/".join(v), []).append(got)
            shown = {k: round(x, 1) for k, x in got.items() if k != "profile"}
            print(f"  round {round_no + 1} {'/'.join(v)}: {shown}", flush=True)
            if args.profile:
                print(json.dumps(got["profile"], indent=1), flush=True)
    result: dict = {"label": args.label, "workload": args.workload, "changes": args.changes,
                    "per_transaction": args.per_transaction,
                    "drain": {v: {k: summary([r[k] for r in rs]) for k in rs[0] if k != "profile"}
                              for v, rs in runs.items()}}
    if args.profile:
        result["profiles"] = {v: [r["profile"] for r in rs] for v, rs in runs.items()}
    if args.seconds:
        result["latency"] = latency.measure(args.tps, args.seconds, backend="logical", warmup=args.seconds / 3)
        print(f"  latency: {result['latency']}", flush=True)
    print(save_result(f"relay-batch-{args.label}" if args.label else "relay-batch", result))


if __name__ == "__main__":
    main()
