"""Replica apply throughput against the relay's, in one run.

A fresh set on one table (id int PRIMARY KEY, n int, s text(100)); ``changes`` changes
queued while no relay runs, in small source transactions of ``per_txn`` changes (half
inserts, half updates of the rows just inserted); then

1. relay: changes/s draining the queue into Kafka (from the relay's ready line until its
   consumer finished the last tick, as bench.peer.relay_throughput);
2. replica apply: changes/s of ``pgshovel2.replica`` applying the same topics to an empty
   target PostgreSQL (``--bootstrap kafka``: tables created, everything applied from the
   topics), timed around ``Replicator.run(until_caught_up=True)``, with batching on
   (``batch_changes`` 5000) and off (1: one target transaction per source transaction).

The target is a second PostgreSQL started by scripts/stack.sh under ``{STACK_DIR}-target``
on ``REPLICA_TARGET_PORT`` (default 26139), stopped at the end.

    .venv/bin/python -m bench.peer.replica [--changes 50000] [--per-txn 10]
"""

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import psycopg2

from bench.peer.common import (
    BOOTSTRAP,
    CLUSTER,
    DSN,
    ENV,
    create_set,
    drop_set,
    prepare,
    relay_running,
    save_result,
    unique,
)
from pgshovel2.backends.trigger import wait_caught_up
from pgshovel2.cluster import ClusterStore
from pgshovel2.replica.apply import ApplyOptions, Replicator
from pgshovel2.replica.bootstrap import bootstrap

REPO = Path(__file__).resolve().parents[2]
TARGET_PORT = os.environ.get("REPLICA_TARGET_PORT", "26139")
TARGET_DIR = f"{os.environ.get('STACK_DIR', str(REPO / '.stack'))}-target"
TARGET_DSN = f"host=127.0.0.1 port={TARGET_PORT} dbname=pgshovel user=postgres"


def target(action: str) -> None:
    """start|stop the target PostgreSQL (scripts/stack.sh with its own STACK_DIR and port)."""
    env = {**os.environ, "STACK_DIR": TARGET_DIR, "PG_PORT": TARGET_PORT}
    subprocess.run([str(REPO / "scripts" / "stack.sh"), action, "postgres"], env=env, check=True)


def fill(cur, table: str, changes: int, per_txn: int) -> None:
    """changes changes in transactions of per_txn: per_txn/2 inserts then as many updates of them."""
    half = max(per_txn // 2, 1)
    cur.execute(f"""DO $$ BEGIN FOR i IN 0..{changes // (2 * half) - 1} LOOP
        INSERT INTO {table} SELECT g, g, repeat('x', 100) FROM generate_series(i * {half} + 1, (i + 1) * {half}) g;
        UPDATE {table} SET n = n + 1 WHERE id BETWEEN i * {half} + 1 AND (i + 1) * {half};
        COMMIT; END LOOP; END $$""")


def apply_rate(store: ClusterStore, name: str, batch_changes: int, registry: str) -> tuple[float, int]:
    """(changes/s, target transactions) of applying the whole set to an emptied target."""
    conn = psycopg2.connect(TARGET_DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP SCHEMA IF EXISTS bench_relay CASCADE; DROP SCHEMA IF EXISTS pgshovel2_replica CASCADE")
    conn.close()
    rep = Replicator(store, name, TARGET_DSN, ApplyOptions(BOOTSTRAP, registry, batch_changes, 0.2, 3600))
    try:
        record, _ = store.get_set(name)
        st = bootstrap(rep.target, CLUSTER, name, record, "kafka", BOOTSTRAP)
        started = time.monotonic()
        st = rep.run(st, threading.Event(), until_caught_up=True)
        return st.changes / (time.monotonic() - started), rep.commits
    finally:
        rep.close()


def measure(changes: int, per_txn: int) -> dict:
    """{relay, apply_batched, apply_unbatched (changes/s), ratios, target transactions, workload}."""
    cur = prepare()
    name = unique("rp")
    queue = create_set(cur, name, "avro")
    fill(cur, f"bench_relay.{name}", changes, per_txn)
    with relay_running(name):
        started = time.monotonic()
        wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=3600)
        relay = changes / (time.monotonic() - started)
    print(f"  relay: {relay:,.0f} changes/s", flush=True)
    target("start")
    try:
        with ClusterStore(ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], CLUSTER) as store:
            batched, txb = apply_rate(store, name, 5000, ENV["PGSHOVEL_SCHEMA_REGISTRY"])
            print(f"  replica apply, batched: {batched:,.0f} changes/s ({txb} target transactions)", flush=True)
            single, txs = apply_rate(store, name, 1, ENV["PGSHOVEL_SCHEMA_REGISTRY"])
            print(f"  replica apply, one per source transaction: {single:,.0f} changes/s ({txs})", flush=True)
    finally:
        target("stop")
        drop_set(cur, name)
    return {"relay": relay, "apply_batched": batched, "apply_unbatched": single,
            "ratio_batched_to_relay": batched / relay, "ratio_unbatched_to_relay": single / relay,
            "ratio_batched_to_unbatched": batched / single,
            "target_transactions": {"batched": txb, "unbatched": txs},
            "workload": f"{changes} changes in source transactions of {per_txn} (inserts, then updates of them), "
                        "one table, Avro, relay draining a pre-filled queue, apply from Kafka to an empty target"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--per-txn", type=int, default=10)
    args = parser.parse_args()
    result = measure(args.changes, args.per_txn)
    path = save_result("replica", result)
    print(json.dumps(result, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
