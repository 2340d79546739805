"""What the benchmarks share: the local stack's endpoints, the CLIs, summaries.

Every benchmark runs against the local stack (``scripts/stack.sh up``, ports
from scripts/env.sh, overridable from the environment) in the cluster "bench".
"""

import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import yaml

from pgshovel2 import names
from pgshovel2.cli.allocator import find_jemalloc

BIN = Path(sys.executable).parent
RESULTS = Path(__file__).resolve().parents[1] / "results"
WORK = RESULTS / "work"
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_PORT = os.environ.get("PG_PORT", "55432")
DSN = f"host=127.0.0.1 port={PG_PORT} dbname={os.environ.get('PG_DB', 'pgshovel')} user=postgres"
BOOTSTRAP = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '29092')}"
CLUSTER = "bench"
ENV = {
    **os.environ,
    "PGSHOVEL_ZOOKEEPER_HOSTS": f"127.0.0.1:{os.environ.get('ZK_PORT', '22181')}",
    "PGSHOVEL_CLUSTER": CLUSTER,
    "PGSHOVEL_BOOTSTRAP_SERVERS": BOOTSTRAP,
    "PGSHOVEL_SCHEMA_REGISTRY": f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '28081')}/apis/ccompat/v7",
}




def relay_allocator() -> str:
    """The memory allocator the bench's relays run with (their --allocator, PGSHOVEL_ALLOCATOR in
    ENV, default auto, and what it gives on this machine), for the results."""
    mode = ENV.get("PGSHOVEL_ALLOCATOR", "auto")
    jemalloc = mode != "system" and (find_jemalloc() is not None or mode == "jemalloc")
    return f"{'jemalloc' if jemalloc else 'system'} (--allocator {mode})"


PR_SET_PDEATHSIG = 1  # prctl(2)


def dies_with_bench() -> None:
    """preexec_fn of the bench's long-lived children (relays, the Connect worker): the child gets
    SIGTERM when the bench dies, however it dies (Linux's parent-death signal; the bench starts them
    from its main thread). A relay left behind by a killed bench would hold its set and send heartbeat
    messages that stall the next run's Debezium."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def pgshovel(*args: str) -> str:
    """Run the admin CLI against the bench cluster; returns its standard output. Raises
    CalledProcessError on failure."""
    return subprocess.run([str(BIN / "pgshovel"), *args], env=ENV, check=True, capture_output=True,
                          text=True).stdout


def prepare():
    """Autocommit cursor on the bench database; schema bench_relay, the cluster and WORK exist."""
    WORK.mkdir(parents=True, exist_ok=True)
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE SCHEMA IF NOT EXISTS bench_relay")
    subprocess.run([str(BIN / "pgshovel"), "cluster", "initialize"], env=ENV, capture_output=True)
    return cur


LOGICAL = ("logical", "pgoutput")  # bench backend names of logical sets (our plugin, pgoutput)


def write_config(name: str, tables: list[dict], backend: str = "trigger", encoding: str = "avro",
                 dsn: str = DSN, envelope: str = "row") -> Path:
    """A set config file (WORK/<name>.yaml) for tables (config entries) of the database dsn;
    backend ``pgoutput``: a logical set with ``decoder: pgoutput``; envelope ``row`` or ``debezium``."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{name}.yaml"
    extra = {"backend": "logical", "decoder": "pgoutput"} if backend == "pgoutput" else {"backend": backend}
    if backend == "plpgsql":  # the trigger backend with the PL/pgSQL capture
        extra = {"backend": "trigger", "capture": "plpgsql"}
    if envelope != "row":
        extra["envelope"] = envelope
    path.write_text(yaml.safe_dump({"database": {"dsn": dsn}, "encoding": encoding, **extra, "tables": tables}))
    return path


def save_result(prefix: str, result: dict) -> Path:
    """Write result as RESULTS/<prefix>-<UTC time>.json; returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{prefix}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def create_set(cur, name: str, encoding: str = "avro",
               columns: str = "id int PRIMARY KEY, n int, s text", backend: str = "trigger") -> str:
    """A set ``name`` on a new table bench_relay.<name> (columns: SQL column list); returns its queue
    (for logical sets, ``logical`` or ``pgoutput``, it returns the queue name all the same)."""
    cur.execute(f"CREATE TABLE bench_relay.{name} ({columns})")
    config = write_config(name, [{"schema": "bench_relay", "name": name}], backend, encoding)
    pgshovel("set", "create", name, str(config))
    return f"pgshovel2.{CLUSTER}.{name}"


def topic(name: str) -> str:
    """The Kafka topic of the table of a set made by create_set."""
    return names.table_topic(name, "bench_relay", name)


def drop_set(cur, name: str) -> None:
    """Drop the set and its table."""
    pgshovel("set", "drop", name)
    cur.execute(f"DROP TABLE bench_relay.{name}")


@contextmanager
def relay_running(name: str, *args: str, ready: str = "skipping the initial snapshot",
                  ) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The relay of set name (--skip-snapshot, log in WORK/<name>.log), started and ready (ready: the
    log text that says so; a relay resuming a logical set's slot says ``resuming``); stopped on exit."""
    log = WORK / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "pgshovel-kafka-relay"), name, "--skip-snapshot", *args],
                                env=ENV, stdout=out, stderr=subprocess.STDOUT, preexec_fn=dies_with_bench)
    try:
        deadline = time.monotonic() + 120
        while ready not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"relay of {name} did not start:\n{log.read_text()}")
            time.sleep(0.01)
        yield proc, log
    finally:
        proc.terminate()
        proc.wait(60)


def summary(values: list[float]) -> dict[str, float]:
    """min/median/max of repeated measurements."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": values}


def cpu_stall_us() -> int:
    """Microseconds, since boot, in which some runnable task waited for a CPU (/proc/pressure/cpu
    "some total"); 0 where the kernel has no PSI. The difference over a run divided by its length is
    the share of time some task was short of CPU; the measured workload itself raises it (20-43 % in
    latency runs on an otherwise idle 2-core host), so it explains a run rather than rejecting it."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return 0
    return int(line.rsplit("total=", 1)[1])


def host_busy_s() -> float:
    """CPU seconds, since boot, the host's CPUs spent on anything but idle and iowait, summed over
    CPUs (/proc/stat's first line). Its difference over a run, divided by the transactions run, is
    what a transaction cost the host: every process's CPU, the short-lived ones (pgbench, its
    backends) and the kernel's included."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that have ended and been waited for
    (getrusage RUSAGE_CHILDREN): its difference around a subprocess.run is that command's CPU."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def cpu_pressure(into: dict) -> Iterator[None]:
    """Sets into["cpu_pressure"] to the share (0..1) of the with-block's wall time in which some task
    waited for a CPU."""
    stall, started = cpu_stall_us(), time.monotonic()
    try:
        yield
    finally:
        into["cpu_pressure"] = round((cpu_stall_us() - stall) / 1e6 / max(time.monotonic() - started, 1e-6), 3)


def unique(prefix: str) -> str:
    """A set/table name not used before."""
    return f"{prefix}{time.time_ns() % 10**12}"


def py_spy(pid: int, out: Path, rate: int) -> subprocess.Popen:
    """Start py-spy recording pid's stacks at rate Hz into out (raw format); stop it with SIGINT."""
    return subprocess.Popen([str(BIN / "py-spy"), "record", "--pid", str(pid), "--rate", str(rate),
                             "--format", "raw", "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
