"""Relay throughput: drain a pre-filled queue into Kafka with Kafka transactions
(exactly-once, the default) and with the idempotent-only producer
(``--no-transactions``, at-least-once), interleaved rounds, in one run.

Usage (local stack up, see scripts/stack.sh):
    .venv/bin/python -m bench.relay_throughput [--changes 300000] [--rounds 3] [--encoding avro]
Writes bench/results/relay-<UTC time>.json; prints min/median/max changes/s per
mode and the ratio of the medians (transactions / idempotent-only).

Each round: a fresh set on one table (id int PRIMARY KEY, n int, s text(100)),
``changes`` inserts committed in transactions of 5,000 rows while no relay
runs, then the relay starts with --skip-snapshot; the clock runs from its
"skipping the initial snapshot" log line (connections, topics and schemas
ready) until the consumer has finished the last tick.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import yaml

from pgshovel2.relay.pgq_source import wait_caught_up

BIN = Path(sys.executable).parent
RESULTS = Path(__file__).parent / "results"
PG_PORT = os.environ.get("PG_PORT", "55432")
DSN = f"host=127.0.0.1 port={PG_PORT} dbname={os.environ.get('PG_DB', 'pgshovel')} user=postgres"
CLUSTER = "bench"
ENV = {
    **os.environ,
    "PGSHOVEL_ZOOKEEPER_HOSTS": f"127.0.0.1:{os.environ.get('ZK_PORT', '22181')}",
    "PGSHOVEL_CLUSTER": CLUSTER,
    "PGSHOVEL_BOOTSTRAP_SERVERS": f"127.0.0.1:{os.environ.get('KAFKA_PORT', '29092')}",
    "PGSHOVEL_SCHEMA_REGISTRY": f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '28081')}/apis/ccompat/v7",
}
MODES = {"transactions": [], "idempotent-only": ["--no-transactions"]}


def pgshovel(*args: str) -> None:
    subprocess.run([str(BIN / "pgshovel"), *args], env=ENV, check=True, capture_output=True, text=True)


def prepare() -> tuple:
    """(autocommit cursor on the bench database, work dir); schema bench_relay and the cluster exist."""
    workdir = RESULTS / "relay-work"
    workdir.mkdir(parents=True, exist_ok=True)
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE SCHEMA IF NOT EXISTS bench_relay")
    subprocess.run([str(BIN / "pgshovel"), "cluster", "initialize"], env=ENV, capture_output=True)
    return cur, workdir


def one_round(cur, mode: str, round_no: int, changes: int, encoding: str, workdir: Path) -> float:
    name = f"r{round_no}{mode.split('-')[0][:4]}{int(time.time())}"
    table = f"bench_relay.{name}"
    cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, s text)")
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": DSN}, "encoding": encoding,
                                      "tables": [{"schema": "bench_relay", "name": name}]}))
    pgshovel("set", "create", name, str(config))
    for start in range(0, changes, 5000):
        cur.execute(f"INSERT INTO {table} SELECT g, g, repeat('x', 100) "
                    f"FROM generate_series(%s, %s) g", (start + 1, min(start + 5000, changes)))
    log = workdir / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "pgshovel-kafka-relay"), name, "--skip-snapshot", *MODES[mode]],
                                env=ENV, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "skipping the initial snapshot" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"relay did not start:\n{log.read_text()}")
            time.sleep(0.01)
        started = time.monotonic()
        wait_caught_up(DSN, f"pgshovel2.{CLUSTER}.{name}", "pgshovel2_relay", timeout=1800)
        elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(60)
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE {table}")
    return changes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--encoding", choices=["avro", "json"], default="avro")
    args = parser.parse_args()
    cur, workdir = prepare()
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    for round_no in range(args.rounds):
        for mode in MODES:
            rates[mode].append(one_round(cur, mode, round_no, args.changes, args.encoding, workdir))
            print(f"round {round_no + 1} {mode}: {rates[mode][-1]:,.0f} changes/s", flush=True)
    medians = {m: statistics.median(r) for m, r in rates.items()}
    result = {"workload": f"drain {args.changes} queued inserts (5,000 per source transaction), "
                          f"{args.encoding}, one table", "changes_per_s": rates, "median": medians,
              "ratio_transactions_to_idempotent": medians["transactions"] / medians["idempotent-only"]}
    out = RESULTS / f"relay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"{'mode':<16} {'min':>9} {'median':>9} {'max':>9}")
    for mode, r in rates.items():
        print(f"{mode:<16} {min(r):9,.0f} {medians[mode]:9,.0f} {max(r):9,.0f}")
    print(f"transactions / idempotent-only: {result['ratio_transactions_to_idempotent']:.3f}")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
