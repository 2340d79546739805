"""The Spark jobs on a standalone cluster (spark-submit, as a user runs them) into Apache Iceberg:
bootstrap under concurrent writes (to Parquet, or straight into Iceberg; trigger and logical sets),
materialize as a stream of MERGEs with the driver SIGKILLed in the middle and restarted from its
checkpoint, a TRUNCATE, and the tables read back by a second engine (PyIceberg, from the Hadoop
catalog's metadata files) equal to the source; ``pgshovel audit`` finds no drift in one round while
the job merges and writes go on, nor after, then names a row changed behind the relay's back."""

import threading
import time
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable

from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.sparkjobs import iceberg
from tests.helpers import caught_up, pgshovel
from tests.integration.bootstrap_helpers import TABLES, Writer, create_set, create_tables, source_rows
from tests.spark_cluster import kill


def _metadata(warehouse: Path, set_name: str, schema: str, table: str) -> Path | None:
    """The current metadata file of a Hadoop-catalog table (version-hint.text names it)."""
    folder = warehouse / set_name / schema / table / "metadata"
    hint = folder / "version-hint.text"
    return folder / f"v{hint.read_text().strip()}.metadata.json" if hint.exists() else None


def iceberg_rows(warehouse: Path, set_name: str, schema: str, table: str, cols: list[str] | None = None) -> dict:
    """key -> row tuple of the Iceberg table's cols (default TABLES[table]), read by PyIceberg (not Spark)."""
    cols = cols or TABLES[table]
    static = StaticTable.from_metadata(str(_metadata(warehouse, set_name, schema, table)))
    data = static.scan(selected_fields=tuple(cols)).to_arrow().to_pylist()
    return {row[cols[0]]: tuple(row[c] for c in cols) for row in data}


def committed_batches(warehouse: Path, set_name: str, schema: str, table: str) -> list[int]:
    """The pgshovel.batch of every snapshot of the table (PyIceberg)."""
    path = _metadata(warehouse, set_name, schema, table)
    if path is None:
        return []
    snapshots = StaticTable.from_metadata(str(path)).metadata.snapshots
    return [int(s.summary[iceberg.BATCH_KEY]) for s in snapshots
            if s.summary is not None and iceberg.BATCH_KEY in s.summary.additional_properties]


def _wait(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (
            f"; {log}:\n{log.read_text()[-3000:]}" if log else "")
        time.sleep(0.5)


@pytest.mark.parametrize("backend, boot_format", [("trigger", "parquet"), ("logical", "iceberg")])
def test_cluster_bootstrap_and_iceberg_stream_equal_the_source(stack, db, schema, cluster, relay_factory,
                                                               spark_cluster, tmp_path, backend, boot_format):
    create_tables(db, schema)
    create_set(stack, cluster, tmp_path, schema, "ice", backend)
    relay_factory("ice").wait_for("snapshot done")
    boot, warehouse, ckpt = tmp_path / "boot", tmp_path / "warehouse", tmp_path / "ckpt"
    common = ["--bootstrap-servers", stack.bootstrap, "--schema-registry", stack.registry]
    writer = Writer(stack.dsn, schema, seed=5)
    writer.start()
    try:
        _wait(lambda: writer.transactions >= 20, 60, "writes before the bootstrap")
        target = ["--format", "iceberg", "--catalog", f"hadoop:{warehouse}"] if boot_format == "iceberg" else []
        spark_cluster.run("bootstrap.py", "ice", "--output", str(boot), "--zookeeper-hosts", stack.zk,
                          "--cluster", cluster, "--partition-rows", "700", *target, *common,
                          log=tmp_path / "boot.log")
        if boot_format == "iceberg":  # the copy is an Iceberg table, the handoff in its properties
            assert committed_batches(warehouse, "ice", schema, "accounts") == []
            props = StaticTable.from_metadata(str(_metadata(warehouse, "ice", schema, "accounts"))).properties
            assert props[iceberg.HANDOFF_KEY] == str(Manifest.load(boot).handoff_point)
        materialize = ["--bootstrap", str(boot), "--format", "iceberg", "--catalog", f"hadoop:{warehouse}",
                       "--stream", "--checkpoint", str(ckpt), *common]
        job = spark_cluster.submit("materialize.py", *materialize, "--trigger-seconds", "2",
                                   log=tmp_path / "mat1.log")
        try:
            _wait(lambda: len(committed_batches(warehouse, "ice", schema, "accounts")) >= 2, 600,
                  "two micro-batches merged into Iceberg", tmp_path / "mat1.log")
            # one round, while the writer writes and the job merges: exact at the snapshots' offsets
            during = pgshovel(stack, cluster, "audit", "ice", "--against", f"iceberg:hadoop:{warehouse}")
            assert "differs:" not in during.stdout and "(micro-batch" in during.stdout, during.stdout
            threading.Event().wait(1.0)  # kill it somewhere in the middle of later batches
        finally:
            kill(job)  # the driver is SIGKILLed: no clean stop
        during = writer.transactions
        _wait(lambda: writer.transactions >= during + 30, 60, "writes after the kill")
    finally:
        writer.finish()
    with db.cursor() as cur:  # a TRUNCATE, then rows again
        cur.execute(f'TRUNCATE "{schema}".branches')
        cur.execute(f'INSERT INTO "{schema}".branches VALUES (100, 1, \'after truncate\'), (7, 2, NULL)')
    with db.cursor() as cur:  # DDL mid-stream: a column added, then one renamed (new set versions)
        cur.execute(f'ALTER TABLE "{schema}".branches ADD COLUMN region text')
        cur.execute(f'UPDATE "{schema}".branches SET region = \'r\' || bid WHERE bid = 100')
        cur.execute(f'INSERT INTO "{schema}".branches VALUES (8, 3, \'added after\', \'west\')')
    with db.cursor() as cur:
        cur.execute(f'ALTER TABLE "{schema}".branches RENAME COLUMN note TO memo')
        cur.execute(f'UPDATE "{schema}".branches SET memo = \'renamed\' WHERE bid = 7')
    caught_up(stack, cluster, "ice")
    spark_cluster.run("materialize.py", *materialize, "--available-now", log=tmp_path / "mat2.log")

    assert ("created Iceberg table" in (tmp_path / "mat1.log").read_text()) == (boot_format == "parquet")
    assert iceberg_rows(warehouse, "ice", schema, "accounts") == source_rows(stack.dsn, schema, "accounts")
    evolved = ["bid", "bbalance", "memo", "region"]  # the Iceberg table followed the DDL
    branches = source_rows(stack.dsn, schema, "branches", evolved)
    assert iceberg_rows(warehouse, "ice", schema, "branches", evolved) == branches
    assert branches == {7: (7, 2, "renamed", None), 8: (8, 3, "added after", "west"),
                        100: (100, 1, "after truncate", "r100")}
    batches = committed_batches(warehouse, "ice", schema, "accounts")
    assert batches == sorted(batches) and len(set(batches)) == len(batches)  # no batch merged twice

    audit = ["audit", "ice", "--against", f"iceberg:hadoop:{warehouse}"]
    clean = pgshovel(stack, cluster, *audit)
    assert "0 differing key(s)" in clean.stdout and "differs:" not in clean.stdout, clean.stdout
    if backend == "trigger":  # a row changed behind the relay's back (its trigger does not fire)
        with db.cursor() as cur:
            cur.execute("SET session_replication_role = replica")
            cur.execute(f'UPDATE "{schema}".accounts SET abalance = abalance + 1 WHERE aid = '
                        f'(SELECT min(aid) FROM "{schema}".accounts) RETURNING aid')
            aid = cur.fetchone()[0]
            cur.execute("SET session_replication_role = origin")
        drift = pgshovel(stack, cluster, *audit, check=False)
        assert drift.returncode == 3, drift.stderr
        assert [line.split(" key ")[1] for line in drift.stdout.splitlines() if "differs:" in line] == [f"[{aid}]"]
