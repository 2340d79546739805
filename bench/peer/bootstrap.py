"""Bootstrap throughput: the Spark bootstrap of pgbench_accounts (rows/s) with 1 and 2 executor
cores (local[1], local[2]) against a single-stream ``COPY ... TO STDOUT`` written to Parquet with
pyarrow, in the same run, on the same table.

    .venv/bin/python -m bench.peer.bootstrap [--scale 50] [--runs 1]

(local stack up; own database ``bench_bootstrap``, pgbench scale 50 = 5M rows; `make bench` runs it).
Spark figures are measured two ways: the whole ``pgshovel bootstrap`` command (JVM start, planning,
Parquet, checksums) and the copy itself (the job's per-table log line).
"""

import argparse
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from bench.peer.common import (
    BIN,
    CLUSTER,
    ENV,
    PG_BIN,
    PG_PORT,
    WORK,
    pgshovel,
    relay_running,
    save_result,
    summary,
    unique,
    write_config,
)

DB = "bench_bootstrap"
DSN = f"host=127.0.0.1 port={PG_PORT} dbname={DB} user=postgres"
COLUMNS = {"aid": pa.int32(), "bid": pa.int32(), "abalance": pa.int32(), "filler": pa.string()}


def prepare(scale: int, set_name: str) -> int:
    """pgbench_accounts at scale in database bench_bootstrap (re-initialized when the scale differs),
    analyzed, with a new set set_name on it; returns its row count."""
    WORK.mkdir(parents=True, exist_ok=True)
    admin = psycopg2.connect(DSN.replace(f"dbname={DB}", "dbname=postgres"))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,))
        if cur.fetchone() is None:
            cur.execute(f"CREATE DATABASE {DB}")
    admin.close()
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_class WHERE relname = 'pgbench_accounts'")
        rows = 0
        if cur.fetchone()[0]:
            cur.execute("SELECT count(*) FROM pgbench_accounts")
            rows = cur.fetchone()[0]
        if rows != scale * 100_000:
            cur.execute("DROP TABLE IF EXISTS pgbench_accounts CASCADE")
            subprocess.run([str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", PG_PORT, "-U", "postgres", "-i", "-q",
                            "-s", str(scale), DB], check=True, capture_output=True)
            cur.execute("VACUUM ANALYZE pgbench_accounts")
    conn.close()
    subprocess.run([str(BIN / "pgshovel"), "cluster", "initialize"], env=ENV, capture_output=True)
    pgshovel("set", "create", set_name, str(write_config(set_name, [{"name": "pgbench_accounts"}], dsn=DSN)))
    return scale * 100_000


def copy_to_parquet(out: Path) -> float:
    """Seconds to COPY pgbench_accounts TO STDOUT (CSV, one stream) into one Parquet file with pyarrow."""
    read_fd, write_fd = os.pipe()
    conn = psycopg2.connect(DSN)
    started = time.monotonic()

    def produce() -> None:
        with os.fdopen(write_fd, "wb") as sink, conn.cursor() as cur:
            cur.copy_expert("COPY pgbench_accounts (aid, bid, abalance, filler) TO STDOUT (FORMAT csv)", sink)

    thread = threading.Thread(target=produce)
    thread.start()
    with os.fdopen(read_fd, "rb") as source:
        reader = pacsv.open_csv(source, read_options=pacsv.ReadOptions(column_names=list(COLUMNS)),
                                convert_options=pacsv.ConvertOptions(column_types=COLUMNS))
        with pq.ParquetWriter(str(out), pa.schema(list(COLUMNS.items()))) as writer:
            for batch in reader:
                writer.write_batch(batch)
    thread.join()
    conn.close()
    return time.monotonic() - started


# (master, read mode): plain JDBC columns (the default for pgbench_accounts) and the encoded-row path
VARIANTS = (("local[1]", "native"), ("local[2]", "native"), ("local[2]", "encoded-rows"))


def _key(master: str, mode: str) -> str:
    return master if mode == "native" else f"{master} {mode}"


def spark_bootstrap(set_name: str, master: str, mode: str, out: Path) -> tuple[float, float]:
    """(command seconds, copy seconds from the job's log) of ``pgshovel bootstrap --master master``."""
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "pgshovel"), "bootstrap", set_name, "--output", str(out), "--master", master,
                           f"--{mode}"], env={**ENV, "PGSHOVEL_CLUSTER": CLUSTER}, capture_output=True, text=True)
    total = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"bootstrap failed:\n{proc.stderr[-3000:]}")
    copied = re.search(r"pgbench_accounts\"?: (\d+) rows in ([\d.]+)s", proc.stderr)
    return total, float(copied.group(2))


def measure(scale: int = 50, runs: int = 1) -> dict:
    """Rows/s of COPY->Parquet and of the Spark bootstrap on local[1], local[2]; ratios to COPY."""
    set_name = unique("boot")
    rows = prepare(scale, set_name)
    work = WORK / "bootstrap"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result: dict = {"rows": rows, "scale": scale, "runs": runs}
    try:
        with relay_running(set_name):
            copy = [copy_to_parquet(work / f"copy-{i}.parquet") for i in range(runs)]
            result["copy_parquet"] = summary([rows / s for s in copy])
            for master, mode in VARIANTS:
                timings = [spark_bootstrap(set_name, master, mode, work / f"{master[6]}-{mode}-{i}")
                           for i in range(runs)]
                result[f"spark_{_key(master, mode)}"] = {"command": summary([rows / t for t, _ in timings]),
                                                         "copy": summary([rows / c for _, c in timings])}
    finally:
        pgshovel("set", "drop", set_name)
    ref = result["copy_parquet"]["median"]
    result["ratio_to_copy"] = {_key(*v): {k: result[f"spark_{_key(*v)}"][k]["median"] / ref
                                          for k in ("command", "copy")} for v in VARIANTS}
    shutil.rmtree(work, ignore_errors=True)
    return result


def lines(result: dict) -> list[str]:
    """The human table of a result."""
    out = [f"bootstrap of pgbench_accounts, {result['rows']:,} rows (rows/s, median of {result['runs']})"]
    out.append(f"  {'COPY TO STDOUT -> Parquet (pyarrow)':<40} {result['copy_parquet']['median']:>12,.0f}  reference")
    for m in (_key(*v) for v in VARIANTS):
        s, r = result[f"spark_{m}"], result["ratio_to_copy"][m]
        for kind, label in (("command", "whole command"), ("copy", "copy only")):
            out.append(f"  {f'Spark {m}, {label}':<40} {s[kind]['median']:>12,.0f}  {r[kind]:.2f} x COPY")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    result = measure(args.scale, args.runs)
    path = save_result("bootstrap", result)
    print("\n".join(lines(result)))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
