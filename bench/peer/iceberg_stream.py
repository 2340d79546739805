"""The materialize half of bench/peer/iceberg.py: ``materialize --format iceberg --stream`` on the standalone
cluster under a steady writer, and what it sustained.

Lag is measured from the source row to the Iceberg snapshot that made it visible: every writer
transaction inserts a row whose ``written_at`` is PostgreSQL's clock_timestamp() in epoch seconds (one
statement per transaction, committed right after it) and updates an older row; after the run every snapshot of the
table is read back with PyIceberg (a second engine, not Spark), and a row's lag is the commit time
(``timestamp-ms``) of the first snapshot holding it minus its ``written_at``. Both clocks are this
host's. Polling is not needed, so the read-back costs the job nothing while it runs. The writer starts
once a first one-row micro-batch has merged: the job's start-up (executors' Python workers, the first
MERGE's planning; minutes on a busy 2-core host) is not counted as lag.
"""

import signal
import statistics
import threading
import time
from pathlib import Path

import psycopg2
from pyiceberg.table import StaticTable

from bench.peer.common import BOOTSTRAP, CLUSTER, DSN, ENV, create_set, drop_set, prepare, relay_running, unique
from pgshovel2.sparkjobs.iceberg import BATCH_KEY
from tests.spark_cluster import SparkCluster, kill

COLUMNS = "id bigint PRIMARY KEY, n int NOT NULL, written_at double precision NOT NULL"  # epoch seconds
NOW = "extract(epoch FROM clock_timestamp())"


class SteadyWriter(threading.Thread):
    """tps transactions a second (paced, not bursty), each an INSERT of a new id with written_at and
    an UPDATE of an older id: two changes. inserted: the last id inserted; error: what stopped it."""

    def __init__(self, table: str, first_id: int, tps: float):
        super().__init__(daemon=True)
        self.table, self.next_id, self.tps = table, first_id, tps
        self.stop, self.inserted, self.error = threading.Event(), first_id - 1, None

    def run(self) -> None:
        conn = psycopg2.connect(DSN)
        conn.autocommit = True
        started, done = time.monotonic(), 0
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    cur.execute(f"INSERT INTO {self.table} VALUES (%s, 0, {NOW})", (self.next_id,))
                    cur.execute(f"UPDATE {self.table} SET n = n + 1 WHERE id = %s", (self.next_id // 2,))
                    self.inserted, self.next_id, done = self.next_id, self.next_id + 1, done + 1
                    delay = started + done / self.tps - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
        except Exception as exc:  # reported by measure
            self.error = exc
        finally:
            conn.close()


def _current(warehouse: Path, set_name: str, table: str) -> StaticTable | None:
    folder = warehouse / set_name / "bench_relay" / table / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        return None
    return StaticTable.from_metadata(str(folder / f"v{hint.read_text().strip()}.metadata.json"))


def _max_id(warehouse: Path, set_name: str, table: str) -> int:
    static = _current(warehouse, set_name, table)
    if static is None or static.current_snapshot() is None:
        return -1
    ids = static.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    return max(ids, default=-1)


def first_visible(warehouse: Path, set_name: str, table: str) -> dict[int, tuple[float, float]]:
    """id -> (written_at, commit time of the first snapshot holding it), epoch seconds, for every id
    a micro-batch MERGE inserted (the bootstrap's CREATE TABLE AS rows left out)."""
    static = _current(warehouse, set_name, table)
    seen: set[int] = set()
    out: dict[int, tuple[float, float]] = {}
    for snap in sorted(static.metadata.snapshots, key=lambda s: s.sequence_number):
        rows = static.scan(snapshot_id=snap.snapshot_id, selected_fields=("id", "written_at")).to_arrow()
        merged = snap.summary is not None and BATCH_KEY in snap.summary.additional_properties
        for row_id, written in zip(rows.column("id").to_pylist(), rows.column("written_at").to_pylist(),
                                   strict=True):
            if row_id not in seen and merged:
                out[row_id] = (written, snap.timestamp_ms / 1000)
            seen.add(row_id)
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def lag_figures(visible: dict[int, tuple[float, float]], start: float, end: float) -> dict:
    """Lag seconds (p50/p95/p99/max; medians of the first and last third of the window, to show
    whether it grew) and changes/s applied: 2 changes per inserted row visible by the window's end."""
    rows = sorted((written, seen) for written, seen in visible.values() if start <= written <= end)
    lags = [seen - written for written, seen in rows]
    third = max(1, len(lags) // 3)
    applied = sum(1 for _, seen in rows if seen <= end)
    return {"rows": len(rows), "lag_p50_s": _percentile(lags, 0.5), "lag_p95_s": _percentile(lags, 0.95),
            "lag_p99_s": _percentile(lags, 0.99), "lag_max_s": max(lags),
            "lag_first_third_median_s": statistics.median(lags[:third]),
            "lag_last_third_median_s": statistics.median(lags[-third:]),
            "applied_changes_per_s": 2 * applied / (end - start)}


def measure_stream(cluster: SparkCluster, work: Path, tps: float, seconds: float, trigger: float,
                   base_rows: int = 10_000, drain_timeout: float = 600) -> dict:
    """Bootstrap a new one-table set (base_rows rows) on the cluster, start the Iceberg stream with
    trigger-second micro-batches and wait for a first one-row micro-batch (warm-up, not measured), then,
    while a SteadyWriter offers tps transactions (2 changes each) for
    seconds, then wait up to drain_timeout seconds for the last row to be visible (drained: whether it
    was; lag figures then cover only the rows visible). Returns offered and applied changes/s,
    lag figures (lag_figures), drain seconds and the micro-batch count."""
    cur = prepare()
    name = unique("ice")
    create_set(cur, name, columns=COLUMNS)
    table = f"bench_relay.{name}"
    cur.execute(f"INSERT INTO {table} SELECT g, 0, {NOW} FROM generate_series(1, %s) g", (base_rows,))
    boot, warehouse, ckpt = work / f"{name}-boot", work / f"{name}-warehouse", work / f"{name}-ckpt"
    common = ["--bootstrap-servers", BOOTSTRAP, "--schema-registry", ENV["PGSHOVEL_SCHEMA_REGISTRY"]]
    try:
        with relay_running(name):
            cluster.run("bootstrap.py", name, "--output", str(boot), "--zookeeper-hosts",
                        ENV["PGSHOVEL_ZOOKEEPER_HOSTS"], "--cluster", CLUSTER, *common, log=work / f"{name}-boot.log")
            log = work / f"{name}-materialize.log"
            job = cluster.submit("materialize.py", "--bootstrap", str(boot), "--format", "iceberg", "--catalog",
                                 f"hadoop:{warehouse}", "--stream", "--checkpoint", str(ckpt), "--trigger-seconds",
                                 str(trigger), *common, log=log)
            try:
                _wait(lambda: _current(warehouse, name, name) is not None, 600, "the Iceberg table", job, log)
                # warm-up: the first micro-batch starts the executors' Python workers (minutes here)
                cur.execute(f"INSERT INTO {table} VALUES (%s, 0, {NOW})", (base_rows + 1,))
                _wait(lambda: _max_id(warehouse, name, name) > base_rows, 900, "the warm-up batch", job, log)
                writer = SteadyWriter(table, base_rows + 2, tps)
                start = time.time()
                writer.start()
                time.sleep(seconds)
                writer.stop.set()
                writer.join()
                end = time.time()
                if writer.error:
                    raise SystemExit(f"writer failed: {writer.error}")
                caught_up = _wait(lambda: _max_id(warehouse, name, name) >= writer.inserted, drain_timeout,
                                  "the last row", job, log, required=False)
                drained = time.time()
            finally:
                kill(job, signal.SIGTERM)
        visible = first_visible(warehouse, name, name)
        batches = len(_current(warehouse, name, name).metadata.snapshots) - 1
        result = {"tps_offered": tps, "offered_changes_per_s": 2 * (writer.inserted - base_rows - 1) / (end - start),
                  "seconds": end - start, "trigger_seconds": trigger, "micro_batches": batches,
                  "drained": caught_up, "drain_s": drained - end, **lag_figures(visible, start, end)}
        if caught_up:
            result["applied_with_drain_changes_per_s"] = 2 * result["rows"] / (drained - start)
    finally:
        drop_set(cur, name)
    return result


def _wait(predicate, timeout: float, what: str, job, log: Path, required: bool = True) -> bool:
    """Poll predicate each second: True once it holds; False after timeout unless required (then
    SystemExit, as when the job exits)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if job.poll() is not None:
            raise SystemExit(f"materialize exited {job.returncode} before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            if not required:
                return False
            raise SystemExit(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    return True
