"""Issue 19's figures on the Spark standalone cluster (scripts/stack.sh spark-up, spark-submit the way
a user runs the jobs, pgshovel2 shipped with --py-files):

- bootstrap rows/s of pgbench_accounts with 1 and with 2 workers (1 core each; SPARK_WORKERS), to
  Parquet and into Iceberg, against a single-stream ``COPY ... TO STDOUT`` -> Parquet (pyarrow,
  bench/peer/bootstrap.py) in the same run, on the same table; each as the whole spark-submit (JVMs,
  planning, writing, checksums) and as the copy itself (the job's per-table log line);
- ``materialize --format iceberg --stream`` under a steady writer: changes/s offered and applied, and
  end-to-end lag from the source row's commit time to the Iceberg snapshot that made it visible
  (bench/peer/iceberg_stream.py says how).

    PYTHONPATH=. .venv/bin/python -m bench.peer.iceberg [--scale 10] [--tps 100] [--seconds 180]
    .venv/bin/python -m bench.peer.run --only iceberg

Local stack up (scripts/stack.sh up); the Spark cluster is started and stopped here with the ports of
scripts/env.sh. It takes 15-25 minutes on 2 shared cores, so ``bench.peer.run`` leaves it out of its
default run (``--only iceberg`` runs it). PYTHONPATH must name this checkout: the CLIs and the
--py-files zip are built from it.
"""

import argparse
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.peer import bootstrap as copy_bench
from bench.peer.common import BIN, CLUSTER, ENV, WORK, pgshovel, relay_running, save_result, summary, unique
from bench.peer.iceberg_stream import measure_stream
from tests.spark_cluster import SparkCluster, package_zip

REPO = Path(__file__).resolve().parents[2]
# (workers, bootstrap format)
VARIANTS = ((1, "parquet"), (2, "parquet"), (2, "iceberg"))


@contextmanager
def spark_cluster(workers: int, work: Path) -> Iterator[SparkCluster]:
    """A standalone master with workers 1-core workers (scripts/stack.sh spark-up), stopped on exit."""
    env = {"SPARK_MASTER_PORT": "27077", **os.environ, "SPARK_WORKERS": str(workers),
           "VENV": os.environ.get("VENV", str(BIN.parent))}
    cluster = SparkCluster(env, package_zip(work / "pgshovel2.zip"))
    cluster.script("spark-down")
    cluster.script("spark-up")
    try:
        yield cluster
    finally:
        cluster.script("spark-down")


def _label(workers: int, fmt: str) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}, {fmt}"


def cluster_bootstrap(cluster: SparkCluster, set_name: str, fmt: str, work: Path) -> tuple[float, float]:
    """(spark-submit seconds, copy seconds from the job's log) of spark/bootstrap.py set_name."""
    out, log = work / f"boot-{unique('b')}", work / f"boot-{unique('b')}.log"
    target = ["--format", "iceberg", "--catalog", f"hadoop:{work / 'warehouse'}"] if fmt == "iceberg" else []
    started = time.monotonic()
    cluster.run("bootstrap.py", set_name, "--output", str(out), "--zookeeper-hosts", ENV["PGSHOVEL_ZOOKEEPER_HOSTS"],
                "--cluster", CLUSTER, "--bootstrap-servers", ENV["PGSHOVEL_BOOTSTRAP_SERVERS"], "--schema-registry",
                ENV["PGSHOVEL_SCHEMA_REGISTRY"], *target, log=log, timeout=1800)
    total = time.monotonic() - started
    copied = re.search(r"pgbench_accounts\"?: (\d+) rows in ([\d.]+)s", log.read_text())
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "warehouse", ignore_errors=True)  # the next Iceberg run creates the table again
    return total, float(copied.group(2))


def measure_bootstrap(scale: int, runs: int, work: Path) -> dict:
    """Rows/s of COPY->Parquet and of the cluster bootstrap for each of VARIANTS; ratios to COPY."""
    set_name = unique("iboot")
    rows = copy_bench.prepare(scale, set_name)
    result: dict = {"rows": rows, "scale": scale, "runs": runs}
    try:
        with relay_running(set_name):
            copy = [copy_bench.copy_to_parquet(work / f"copy-{i}.parquet") for i in range(runs)]
            result["copy_parquet"] = summary([rows / s for s in copy])
            for workers in sorted({w for w, _ in VARIANTS}):
                with spark_cluster(workers, work) as cluster:
                    for fmt in (f for w, f in VARIANTS if w == workers):
                        timings = [cluster_bootstrap(cluster, set_name, fmt, work) for _ in range(runs)]
                        result[_label(workers, fmt)] = {"command": summary([rows / t for t, _ in timings]),
                                                        "copy": summary([rows / c for _, c in timings])}
    finally:
        pgshovel("set", "drop", set_name)
    ref = result["copy_parquet"]["median"]
    result["ratio_to_copy"] = {_label(*v): {k: result[_label(*v)][k]["median"] / ref for k in ("command", "copy")}
                               for v in VARIANTS}
    return result


def measure(scale: int = 10, runs: int = 1, tps: float = 100, seconds: float = 180, trigger: float = 5,
            drain_timeout: float = 600) -> dict:
    """Both halves (see the module docstring; scale 0: the stream alone); the stream on 2 workers,
    given drain_timeout seconds to catch up after the writer stops."""
    work = WORK / "iceberg"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run([str(BIN / "pgshovel"), "cluster", "initialize"], env=ENV, capture_output=True)
    result: dict = {"load_average_at_start": os.getloadavg()}  # the host is shared: say how busy it was
    if scale:
        result["bootstrap"] = measure_bootstrap(scale, runs, work)
    with spark_cluster(2, work) as cluster:
        result["materialize"] = measure_stream(cluster, work, tps, seconds, trigger, drain_timeout=drain_timeout)
    result["load_average_at_end"] = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    return result


def bootstrap_lines(boot: dict) -> list[str]:
    """The human table of measure_bootstrap's result."""
    out = [f"Spark standalone bootstrap of pgbench_accounts, {boot['rows']:,} rows (rows/s, median of "
           f"{boot['runs']})",
           f"  {'COPY TO STDOUT -> Parquet (pyarrow)':<44} {boot['copy_parquet']['median']:>12,.0f}  reference"]
    for v in VARIANTS:
        s, r = boot[_label(*v)], boot["ratio_to_copy"][_label(*v)]
        for kind, what in (("command", "whole spark-submit"), ("copy", "copy only")):
            out.append(f"  {f'{_label(*v)}, {what}':<44} {s[kind]['median']:>12,.0f}  {r[kind]:.2f} x COPY")
    return out


def lines(result: dict) -> list[str]:
    """The human table of a result."""
    out = bootstrap_lines(result["bootstrap"]) if "bootstrap" in result else []
    mat = result["materialize"]
    out.append(f"materialize --format iceberg --stream, 2 workers, {mat['trigger_seconds']:g}s trigger, "
               f"{mat['seconds']:.0f}s writer")
    drained = (f"until the last was visible: {mat['applied_with_drain_changes_per_s']:,.0f}" if mat["drained"]
               else f"NOT caught up {mat['drain_s']:.0f}s after the writer stopped")
    out.append(f"  {'changes/s offered / applied':<44} {mat['offered_changes_per_s']:>12,.0f} / "
               f"{mat['applied_changes_per_s']:,.0f}  ({drained}; {mat['micro_batches']} snapshots)")
    out.append(f"  {'lag s, source commit -> Iceberg snapshot':<44} p50 {mat['lag_p50_s']:.1f}  p95 "
               f"{mat['lag_p95_s']:.1f}  p99 {mat['lag_p99_s']:.1f}  max {mat['lag_max_s']:.1f}")
    out.append(f"  {'lag median, first / last third':<44} {mat['lag_first_third_median_s']:.1f} / "
               f"{mat['lag_last_third_median_s']:.1f}; drain after the writer stopped {mat['drain_s']:.1f}s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=10, help="pgbench scale (100,000 rows each; 0: no bootstrap "
                        "figures, the stream alone)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--tps", type=float, default=100, help="writer transactions/s (2 changes each)")
    parser.add_argument("--seconds", type=float, default=180, help="how long the writer runs")
    parser.add_argument("--trigger-seconds", type=float, default=5)
    parser.add_argument("--drain-timeout", type=float, default=600, help="seconds to wait for the stream to "
                        "catch up after the writer stops (lag figures then cover the rows visible)")
    args = parser.parse_args()
    result = measure(args.scale, args.runs, args.tps, args.seconds, args.trigger_seconds, args.drain_timeout)
    path = save_result("iceberg", result)
    print("\n".join(lines(result)))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
