"""The Spark jobs on a standalone cluster (spark-submit, as a user runs them) into Apache Iceberg:
bootstrap under concurrent writes, materialize as a stream of MERGEs with the driver SIGKILLed in the
middle and restarted from its checkpoint, a TRUNCATE, and the tables read back by a second engine
(PyIceberg, from the Hadoop catalog's metadata files) equal to the source."""

import threading
import time
from pathlib import Path

from pyiceberg.table import StaticTable

from pgshovel2.sparkjobs import iceberg
from tests.helpers import caught_up
from tests.integration.bootstrap_helpers import TABLES, Writer, create_set, create_tables, source_rows
from tests.spark_cluster import kill


def _metadata(warehouse: Path, set_name: str, schema: str, table: str) -> Path | None:
    """The current metadata file of a Hadoop-catalog table (version-hint.text names it)."""
    folder = warehouse / set_name / schema / table / "metadata"
    hint = folder / "version-hint.text"
    return folder / f"v{hint.read_text().strip()}.metadata.json" if hint.exists() else None


def iceberg_rows(warehouse: Path, set_name: str, schema: str, table: str) -> dict:
    """key -> row tuple of the Iceberg table, read by PyIceberg (not Spark)."""
    cols = TABLES[table]
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


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_cluster_bootstrap_and_iceberg_stream_equal_the_source(stack, db, schema, cluster, relay_factory,
                                                               spark_cluster, tmp_path):
    create_tables(db, schema)
    create_set(stack, cluster, tmp_path, schema, "ice")
    relay_factory("ice").wait_for("snapshot done")
    boot, warehouse, ckpt = tmp_path / "boot", tmp_path / "warehouse", tmp_path / "ckpt"
    common = ["--bootstrap-servers", stack.bootstrap, "--schema-registry", stack.registry]
    writer = Writer(stack.dsn, schema, seed=5)
    writer.start()
    try:
        _wait(lambda: writer.transactions >= 20, 60, "writes before the bootstrap")
        spark_cluster.run("bootstrap.py", "ice", "--output", str(boot), "--zookeeper-hosts", stack.zk,
                          "--cluster", cluster, "--partition-rows", "700", *common, log=tmp_path / "boot.log")
        materialize = ["--bootstrap", str(boot), "--format", "iceberg", "--catalog", f"hadoop:{warehouse}",
                       "--stream", "--checkpoint", str(ckpt), *common]
        job = spark_cluster.submit("materialize.py", *materialize, "--trigger-seconds", "2",
                                   log=tmp_path / "mat1.log")
        try:
            _wait(lambda: len(committed_batches(warehouse, "ice", schema, "accounts")) >= 2, 300,
                  "two micro-batches merged into Iceberg")
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
    caught_up(stack, cluster, "ice")
    spark_cluster.run("materialize.py", *materialize, "--available-now", log=tmp_path / "mat2.log")

    assert "created Iceberg table" in (tmp_path / "mat1.log").read_text()
    for table in TABLES:
        assert iceberg_rows(warehouse, "ice", schema, table) == source_rows(stack.dsn, schema, table), table
    assert sorted(source_rows(stack.dsn, schema, "branches")) == [7, 100]
    batches = committed_batches(warehouse, "ice", schema, "accounts")
    assert batches == sorted(batches) and len(set(batches)) == len(batches)  # no batch merged twice
