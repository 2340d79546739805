"""`make demo`: pgbench changes captured by triggers, relayed to Kafka, verified.

Runs against the local stack (scripts/stack.sh up). Steps: pgbench -i; a
pgbench run without capture (baseline tps); `pgshovel set create`; the relay
(initial snapshot, then the queue) while pgbench runs again (tps with
capture); wait until the relay caught up; rebuild every table from Kafka and
compare with the source. Exits non-zero if any table differs.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_PORT = os.environ.get("PG_PORT", "55432")
PG_DB = os.environ.get("PG_DB", "pgshovel")
SCALE = os.environ.get("DEMO_SCALE", "10")
SECONDS = os.environ.get("DEMO_SECONDS", "20")
ENV = {
    **os.environ,
    "PGSHOVEL_ZOOKEEPER_HOSTS": f"127.0.0.1:{os.environ.get('ZK_PORT', '22181')}",
    "PGSHOVEL_CLUSTER": "demo",
    "PGSHOVEL_BOOTSTRAP_SERVERS": f"127.0.0.1:{os.environ.get('KAFKA_PORT', '29092')}",
    "PGSHOVEL_SCHEMA_REGISTRY": f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '28081')}/apis/ccompat/v7",
}
DSN = f"host=127.0.0.1 port={PG_PORT} dbname={PG_DB} user=postgres"


def run(*cmd: str, capture: bool = False) -> str:
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=ENV, check=True, text=True,
                         stdout=subprocess.PIPE if capture else None)
    return out.stdout or ""


def pgbench(*args: str) -> str:
    return run(str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", PG_PORT, "-U", "postgres",
               *args, PG_DB, capture=True)


def tps(output: str) -> float:
    return float(re.search(r"tps = ([\d.]+)", output).group(1))


def delete_topics(prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ENV["PGSHOVEL_BOOTSTRAP_SERVERS"]})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    for future in (admin.delete_topics(topics).values() if topics else ()):
        future.result()
    time.sleep(1 if topics else 0)


def pending_events(queue: str) -> int:
    """Events committed to queue and not yet relayed (forces a tick first)."""
    import psycopg2

    with psycopg2.connect(DSN) as conn, conn.cursor() as cur:
        cur.execute("SELECT pgq.force_tick(%s)", (queue,))
        cur.execute("SELECT pgq.ticker(%s)", (queue,))
        cur.execute("SELECT pending_events FROM pgq.get_consumer_info(%s, 'pgshovel2_relay')", (queue,))
        return cur.fetchone()[0]


def wait_for_log(path: Path, text: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"relay never logged {text!r}; see {path}")
        time.sleep(0.1)


def main() -> int:
    sys.path.insert(0, str(REPO))
    from pgshovel2.backends.trigger import wait_caught_up

    pgshovel, relay_bin = str(BIN / "pgshovel"), str(BIN / "pgshovel-kafka-relay")
    queue = "pgshovel2.demo.pgbench"
    run(pgshovel, "cluster", "initialize")
    if "pgbench\t" in run(pgshovel, "set", "list", capture=True):
        run(pgshovel, "set", "drop", "pgbench")
    delete_topics("pgbench")
    pgbench("-i", "-q", "-s", SCALE)
    bench = ("-c", "4", "-j", "2", "-T", SECONDS, "-n")
    baseline = tps(pgbench(*bench))
    run(pgshovel, "set", "create", "pgbench", str(REPO / "configs" / "pgbench.yaml"))
    log_path = REPO / ".stack" / "demo-relay.log"
    log_path.write_text("")

    def start_relay() -> subprocess.Popen:
        with open(log_path, "a") as log:
            return subprocess.Popen([relay_bin, "pgbench", "--progress-interval", "5"], env=ENV,
                                    stdout=log, stderr=subprocess.STDOUT)

    def stop_relay(proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    relay = start_relay()  # initial snapshot of the existing rows
    try:
        wait_for_log(log_path, "snapshot done", relay)
    finally:
        stop_relay(relay)
    triggers_only = tps(pgbench(*bench))  # changes pile up in the queue
    backlog = pending_events(queue)
    relay = start_relay()
    try:
        drain_start = time.monotonic()
        wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=900)
        drain = time.monotonic() - drain_start
        streaming = tps(pgbench(*bench))
        stream_start = time.monotonic()
        wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=900)
        tail = time.monotonic() - stream_start
    finally:
        stop_relay(relay)
    text = log_path.read_text()
    snap = re.search(r"snapshot done: (\d+) rows in ([\d.]+)s", text)
    changes = sum(int(n) for n in re.findall(r"stopped after (\d+) changes", text))
    verified = subprocess.run([pgshovel, "set", "verify", "pgbench", "--no-wait"], env=ENV, text=True)
    print()
    print(f"pgbench (-c 4 -j 2 -T {SECONDS}, scale {SCALE}) tps without capture:   {baseline:,.0f}")
    print(f"  with capture triggers (relay stopped):            {triggers_only:,.0f} "
          f"({(triggers_only / baseline - 1) * 100:+.1f}%)")
    print(f"  with capture triggers and the relay streaming:    {streaming:,.0f} "
          f"({(streaming / baseline - 1) * 100:+.1f}%)  [same 2 cores]")
    if snap:
        rows, secs = int(snap.group(1)), float(snap.group(2))
        print(f"initial snapshot: {rows:,} rows in {secs:.1f}s ({rows / secs:,.0f} rows/s)")
    print(f"backlog drain: {backlog:,} queued changes in {drain:.1f}s ({backlog / drain:,.0f} changes/s,"
          " relay start-up included)")
    print(f"caught up {tail:.1f}s after the streaming run ended; {changes:,} changes relayed in all")
    print(f"relay log: {log_path}")
    print("verification:", "state rebuilt from Kafka equals the source tables" if verified.returncode == 0
          else "FAILED")
    return verified.returncode


if __name__ == "__main__":
    sys.exit(main())
