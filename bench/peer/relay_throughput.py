"""Relay throughput: changes/s draining a pre-filled queue into Kafka, Avro and
JSON, with Kafka transactions (exactly-once, the default) and with the
idempotent-only producer (``--no-transactions``), against the machine's
ceiling: a librdkafka producer (same settings) sending the very messages the
relay wrote, pre-encoded, to a fresh topic of the same broker.

Each run: a fresh set on one table (id int PRIMARY KEY, n int, s text(100)),
``changes`` inserts committed in source transactions of 5,000 rows while no
relay runs; the clock runs from the relay's "skipping the initial snapshot"
line (connections, topics, schemas ready) until its consumer has finished the
last tick.

    .venv/bin/python -m bench.peer.relay_throughput [--changes 1000000] [--rounds 3] [--workload mixed]

``--workload mixed``: the ten-type table of bench/peer/workloads.py instead (the default,
``narrow``, is the table above).
"""

import argparse
import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peer import workloads
from bench.peer.common import (
    BOOTSTRAP,
    CLUSTER,
    DSN,
    create_set,
    drop_set,
    prepare,
    relay_running,
    summary,
    topic,
    unique,
)
from pgshovel2.backends.trigger import wait_caught_up
from pgshovel2.ops.verify import read_topics
from pgshovel2.sinks.kafka import PRODUCER_DEFAULTS

MODES = {"transactions": (), "idempotent-only": ("--no-transactions",)}


def fill(cur, table: str, changes: int) -> None:
    """changes inserts into table, 5,000 per source transaction."""
    for start in range(0, changes, 5000):
        cur.execute(f"INSERT INTO {table} SELECT g, g, repeat('x', 100) FROM generate_series(%s, %s) g",
                    (start + 1, min(start + 5000, changes)))


def drain(cur, encoding: str, mode: str, changes: int, workload: str = "narrow") -> tuple[float, str]:
    """(changes/s, topic) of one drain of workload's rows; the set is dropped, its topic stays."""
    name = unique("tp")
    chosen = workloads.WORKLOADS[workload]
    queue = create_set(cur, name, encoding, chosen.columns)
    if workload == "narrow":
        fill(cur, f"bench_relay.{name}", changes)
    else:
        workloads.fill(cur, chosen, f"bench_relay.{name}", changes)
    with relay_running(name, *MODES[mode]):
        started = time.monotonic()
        wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=3600)
        rate = changes / (time.monotonic() - started)
    drop_set(cur, name)
    return rate, topic(name)


def ceiling(topic: str) -> float:
    """messages/s of a plain idempotent producer re-sending topic's messages to a fresh topic."""
    messages = [m for part in read_topics(BOOTSTRAP, [topic], timeout=120).values() for m in part]
    target = f"bench-ceiling-{time.time_ns()}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(target, 3, 1)])[target].result()
    producer = Producer({"bootstrap.servers": BOOTSTRAP, **PRODUCER_DEFAULTS})
    prepared = [(k, v, list(h.items())) for k, v, h in messages]
    started = time.monotonic()
    for key, value, headers in prepared:
        while True:
            try:
                producer.produce(target, value, key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0
    rate = len(prepared) / (time.monotonic() - started)
    admin.delete_topics([target, topic])
    return rate


def measure(changes: int, rounds: int, encodings: tuple[str, ...] = ("avro", "json"), workload: str = "narrow") -> dict:
    """{"<encoding>/<mode>": summary of changes/s, "<encoding>/ceiling": summary of messages/s, ratios}."""
    cur = prepare()
    runs: dict[str, list[float]] = {}
    for round_no in range(rounds):
        for encoding in encodings:
            for mode in MODES:
                rate, topic = drain(cur, encoding, mode, changes, workload)
                runs.setdefault(f"{encoding}/{mode}", []).append(rate)
                print(f"  round {round_no + 1} {encoding}/{mode}: {rate:,.0f} changes/s", flush=True)
                if mode == "transactions":
                    runs.setdefault(f"{encoding}/ceiling", []).append(ceiling(topic))
                    print(f"  round {round_no + 1} {encoding}/ceiling: {runs[f'{encoding}/ceiling'][-1]:,.0f} "
                          "messages/s", flush=True)
    out = {key: summary(values) for key, values in runs.items()}
    for encoding in encodings:
        tx, idem, ceil = (out[f"{encoding}/{m}"]["median"] for m in ("transactions", "idempotent-only", "ceiling"))
        out[f"{encoding}/ratio_transactions_to_idempotent"] = tx / idem
        out[f"{encoding}/ratio_transactions_to_ceiling"] = tx / ceil
    out["workload"] = (f"drain {changes} queued inserts (5,000 per source transaction), one {workload} table, "
                       f"cluster {CLUSTER}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", default="narrow", choices=sorted(workloads.WORKLOADS))
    args = parser.parse_args()
    print(json.dumps(measure(args.changes, args.rounds, workload=args.workload), indent=2))


if __name__ == "__main__":
    main()
