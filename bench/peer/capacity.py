"""Capacity planning figures, per unit, for docs/capacity.rst: what one relay costs at a steady rate
of changes, per capture path, and what a set costs ZooKeeper and the Kafka broker.

Per path (trigger with C capture, logical with our plugin, logical with pgoutput), a set on the
pgbench tables streams ``pgbench -N -R rate`` (2 changes a transaction: an UPDATE of
pgbench_accounts and an INSERT into pgbench_history) for ``seconds``:

- relay CPU (user + system, /proc) per 1,000 changes/s, as a fraction of one core;
- the capture's own server-side CPU beside it: the walsender of a logical set, the relay's database
  sessions of a trigger set (its PgQ batch reads and ticks);
- relay RSS (VmRSS at the end of the run, VmHWM) and an idle relay's RSS before the run;
- the relay's sockets (PostgreSQL, Kafka brokers, ZooKeeper, metrics);
- the Kafka broker's CPU per Kafka transaction the relay committed (records of the positions topic,
  one per Kafka transaction), messages included, less its CPU while idle (measured just before);
- the relay's PostgreSQL sessions by application_name;
- ZooKeeper: znodes under the set's path and watches the server holds (the ``wchs`` four-letter
  word, when the server allows it) with the relay running, against the same counts without the set.

    .venv/bin/python -m bench.peer.capacity [--rate 1000] [--seconds 20] [--backends trigger,logical,pgoutput]

Result JSON in bench/results/capacity-<time>.json and printed.
"""

import argparse
import json
import os
import re
import socket
import time
from pathlib import Path

from kazoo.client import KazooClient

from bench.peer.capture_overhead import pgbench
from bench.peer.common import CLUSTER, ENV, LOGICAL, prepare, save_result
from bench.peer.counter import committed_count
from bench.peer.logical import PGBENCH, caught_up, cpu_seconds, helper_pids, pgbench_set

CHANGES_PER_TXN = 2  # pgbench -N: UPDATE pgbench_accounts + INSERT pgbench_history (+ a SELECT)


def rss_mib(pid: int) -> dict[str, float]:
    """{"rss": VmRSS, "hwm": VmHWM} of a live process, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: round(int(fields[f].split()[0]) / 1024, 1) for k, f in (("rss", "VmRSS"), ("hwm", "VmHWM"))}


def sockets(pid: int) -> dict[str, int]:
    """The process's TCP connections by the remote port's service: {"postgres", "kafka", "zookeeper",
    "other"}: counted from /proc/<pid>/net/tcp for the inodes of the process's own socket fds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = {os.environ.get("PG_PORT", "55432"): "postgres", os.environ.get("KAFKA_PORT", "29092"): "kafka",
             os.environ.get("ZK_PORT", "22181"): "zookeeper"}
    counts = {"postgres": 0, "kafka": 0, "zookeeper": 0, "other": 0}
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if parts[9] in inodes and parts[3] == "01":  # ESTABLISHED
            counts[ports.get(str(int(parts[2].split(":")[1], 16)), "other")] += 1
    return counts


def zk_counts(set_name: str | None) -> dict[str, int | None]:
    """{"znodes": under the set's path (0 without a set), "watches": the server's total (None when the
    server does not answer ``wchs``)}."""
    hosts = ENV["PGSHOVEL_ZOOKEEPER_HOSTS"]
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        def count(path: str) -> int:
            return 1 + sum(count(f"{path}/{child}") for child in zk.get_children(path))
        znodes = count(f"/pgshovel2/{CLUSTER}/sets/{set_name}") if set_name else 0
    finally:
        zk.stop()
        zk.close()
    host, port = hosts.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"wchs")
        reply = b"".join(iter(lambda: conn.recv(4096), b"")).decode()
    found = re.search(r"Total watches:(\d+)", reply)
    return {"znodes": znodes, "watches": int(found.group(1)) if found else None}


def relay_sessions(cur, since) -> dict[str, int]:
    """The PostgreSQL sessions opened since the relay started (before any client of the run): count by
    application_name (backend type where it has none)."""
    cur.execute("SELECT coalesce(nullif(application_name, ''), backend_type), count(*) FROM pg_stat_activity "
                "WHERE backend_start >= %s AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 1", (since,))
    return dict(cur.fetchall())


def idle_cpu_per_s(pid: int | None, seconds: float = 5.0) -> float:
    """CPU seconds per second a process spends while nothing is written (0 for no process): the
    broker's own background work, taken off its CPU during the run."""
    if pid is None:
        return 0.0
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def measure_path(cur, backend: str, rate: int, seconds: int) -> dict:
    """The figures of the module docstring for one capture path (bench.peer.logical.VARIANTS name)."""
    zk_before = zk_counts(None)
    with pgbench_set(cur, backend) as (name, relay):
        assert relay is not None
        time.sleep(3)
        idle = rss_mib(relay.proc.pid)
        pids = helper_pids(cur, relay, name if backend in LOGICAL else None)
        capture_key = "walsender" if backend in LOGICAL else "relay_db"
        sessions = relay_sessions(cur, relay.started_at)
        broker_idle = idle_cpu_per_s(pids.get("kafka"))
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        txns_before = committed_count(f"{name}.positions")
        out = pgbench("-N", "-n", "-c", "2", "-j", "2", "-R", str(rate), "-T", str(seconds))
        caught_up(name, backend)
        cpu = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
        kafka_txns = committed_count(f"{name}.positions") - txns_before
        txns = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
        zk_set = zk_counts(name)
        result = {"changes": txns * CHANGES_PER_TXN, "changes_per_s": round(txns * CHANGES_PER_TXN / seconds),
                  "relay_rss_mib": rss_mib(relay.proc.pid), "idle_relay_rss_mib": idle,
                  "relay_sockets": sockets(relay.proc.pid), "relay_pg_sessions": sessions,
                  "kafka_txns": kafka_txns, "load_average": os.getloadavg()[0],
                  "zk_set_znodes": zk_set["znodes"],
                  "zk_set_watches": (zk_set["watches"] - zk_before["watches"]
                                     if zk_set["watches"] is not None and zk_before["watches"] is not None else None)}
    per_k = result["changes_per_s"] / 1000
    result["relay_cores_per_1k_changes_s"] = round(cpu["relay"] / seconds / per_k, 4)
    result["capture_cores_per_1k_changes_s"] = round(cpu.get(capture_key, 0.0) / seconds / per_k, 4)
    if "kafka" in cpu and kafka_txns:
        busy = max(0.0, cpu["kafka"] - broker_idle * seconds)
        result["broker_idle_cores"] = round(broker_idle, 4)
        result["broker_cpu_ms_per_kafka_txn"] = round(busy * 1000 / kafka_txns, 3)
        result["changes_per_kafka_txn"] = round(result["changes"] / kafka_txns, 1)
    return result


def measure(rate: int = 1000, seconds: int = 20, backends: tuple[str, ...] = ("trigger", *LOGICAL)) -> dict:
    """{"rate_tps", "seconds", backend: measure_path's figures}; the pgbench tables at scale 10."""
    pgbench("-i", "-q", "-s", "10")
    cur = prepare()
    result: dict = {"rate_tps": rate, "seconds": seconds, "tables": PGBENCH}
    for backend in backends:
        result[backend] = measure_path(cur, backend, rate, seconds)
    return result


def lines(result: dict) -> list[str]:
    """Human summary lines of measure's result, one per path."""
    out = []
    for backend in (b for b in ("trigger", *LOGICAL) if b in result):
        r = result[backend]
        out.append(f"capacity {backend:<9} relay {r['relay_cores_per_1k_changes_s']:.3f} cores per 1k changes/s, "
                   f"RSS {r['relay_rss_mib']['rss']} MiB, broker {r.get('broker_cpu_ms_per_kafka_txn', '?')} ms "
                   f"per Kafka txn, ZooKeeper {r['zk_set_znodes']} znodes")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000, help="pgbench transactions/s (-R); 2 changes each")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--backends", default="trigger,logical,pgoutput")
    args = parser.parse_args()
    result = measure(args.rate, args.seconds, tuple(args.backends.split(",")))
    print(json.dumps(result, indent=2))
    print("\n".join(lines(result)))
    print(save_result("capacity", result))


if __name__ == "__main__":
    main()
