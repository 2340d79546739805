"""materialize after a set upgrade: a table added to the set after the bootstrap gets its old rows
from the upgrade's online snapshot (snapshot rows the bootstrap does not hold are applied, not
skipped: pgshovel2.txids.holds_snapshot_row), its changes from the stream; Parquet and Iceberg."""

import subprocess
import sys
import threading

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import REPO, caught_up, cli_env, pgshovel, until, write_config
from tests.integration.bootstrap_helpers import (
    TABLES,
    create_set,
    create_tables,
    merge_into_iceberg,
    parquet_rows,
    source_rows,
)
from tests.integration.test_iceberg import _metadata, iceberg_rows
from tests.online import start_writers, stop_writers, wait_state

ROWS = 3000
ADDED = ["id", "n", "s"]


def _by_id(rows: list[dict]) -> dict:
    return {r["id"]: tuple(r[c] for c in ADDED) for r in rows}


def _bootstrap_then_add_a_table(stack, db, schema: str, cluster: str, relay_factory, spark, tmp_path, name: str,
                                backend: str, before_upgrade=lambda boot: None):
    """A set over TABLES, its Parquet bootstrap (returned: the directory), then a table 'added' with
    ROWS old rows added by set upgrade while writers change it; caught up at the end.
    before_upgrade(bootstrap directory) runs once the writers started, before the upgrade."""
    create_tables(db, schema, accounts=500)
    create_set(stack, cluster, tmp_path, schema, name, backend=backend)
    added = f'"{schema}".added'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {added} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {added} SELECT g, 0, 'old' FROM generate_series(1, %s) g", (ROWS,))
    relay_factory(name).wait_for("snapshot done")
    boot = tmp_path / "boot"
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, name, bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry))
    stop, threads = start_writers(stack.dsn, added, ROWS)
    try:
        before_upgrade(boot)
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": t} for t in [*TABLES, "added"]],
                           backend=backend)
        pgshovel(stack, cluster, "set", "upgrade", name, str(cfg))
        wait_state(stack, cluster, name, "done")
    finally:
        stop_writers(stop, threads)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".branches SET note = \'after upgrade\' WHERE bid = 3')
    caught_up(stack, cluster, name)
    return boot


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_a_table_added_after_the_bootstrap_is_materialized_whole(stack, db, schema, cluster, relay_factory, spark,
                                                                 tmp_path, backend):
    boot = _bootstrap_then_add_a_table(stack, db, schema, cluster, relay_factory, spark, tmp_path, "mad", backend)
    options = materialize.MaterializeOptions(str(boot), str(tmp_path / "out"), stack.bootstrap, stack.registry,
                                             zookeeper_hosts=stack.zk, cluster=cluster)
    materialize.run(spark, options)
    current = materialize.current_state(tmp_path / "out") / "tables"
    src = source_rows(stack.dsn, schema, "added", ADDED)
    state = _by_id(pq.read_table(str(current / bootstrap.table_dir(schema, "added")), columns=ADDED).to_pylist())
    assert len(state) == len(src) and state == src, (len(state), len(src))
    for t in TABLES:  # the copied tables: bootstrap + stream, their snapshot rows not applied twice
        assert parquet_rows(current / bootstrap.table_dir(schema, t), t) == source_rows(stack.dsn, schema, t)


def test_a_table_added_while_the_stream_runs_is_read_without_a_restart(stack, db, schema, cluster, relay_factory,
                                                                       spark, tmp_path):
    """The Parquet stream, started before the upgrade, restarts its own query on the same
    checkpoint when the set's record gains the table (tablewatch): the added table's state then
    equals the source while the job was never restarted by hand."""
    out, failed, jobs = tmp_path / "out", [], []

    def run(options) -> None:
        try:
            materialize.run(spark, options)
        except Exception as exc:  # noqa: BLE001 -- reported by the test
            failed.append(exc)

    def start(boot) -> None:
        options = materialize.MaterializeOptions(str(boot), str(out), stack.bootstrap, stack.registry, stream=True,
                                                 checkpoint=str(tmp_path / "ckpt"), trigger_seconds=1.0,
                                                 zookeeper_hosts=stack.zk, cluster=cluster)
        jobs.append(threading.Thread(target=run, args=(options,)))
        jobs[0].start()
        until(lambda: spark.streams.active or failed, "the stream to start", 120, 0.5)

    _bootstrap_then_add_a_table(stack, db, schema, cluster, relay_factory, spark, tmp_path, "mas", "trigger", start)
    src = source_rows(stack.dsn, schema, "added", ADDED)

    def added_state() -> dict:
        current = materialize.current_state(out)
        path = None if current is None else current / "tables" / bootstrap.table_dir(schema, "added")
        return {} if path is None or not path.exists() else _by_id(pq.read_table(str(path), columns=ADDED).to_pylist())
    copied = {t: source_rows(stack.dsn, schema, t) for t in TABLES}

    def equal() -> bool:
        if added_state() != src:
            return False
        current = materialize.current_state(out) / "tables"
        return all(parquet_rows(current / bootstrap.table_dir(schema, t), t) == copied[t] for t in TABLES)
    try:
        until(lambda: failed or equal(), "every table's state to equal the source", 300, 0.5)
    finally:
        for query in spark.streams.active:
            query.stop()
        jobs[0].join(120)
    assert not failed, failed
    assert not jobs[0].is_alive()  # a stop from outside ends the job: no restart then


def _merge_into_iceberg(stack, cluster: str, boot, tmp_path) -> None:
    merge_into_iceberg(stack, cluster, boot, tmp_path / "warehouse", tmp_path / "ckpt")


@pytest.mark.spark_job
@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_a_table_added_after_the_bootstrap_is_merged_whole_into_iceberg(stack, db, schema, cluster, relay_factory,
                                                                        spark, tmp_path, backend):
    """The stream ran before the upgrade: its restart on the same checkpoint reads the added
    table's topic too (a topic list the checkpoint does not know) and creates its Iceberg table."""
    warehouse = tmp_path / "warehouse"
    name = f"mai{backend[0]}"
    boot = _bootstrap_then_add_a_table(stack, db, schema, cluster, relay_factory, spark, tmp_path, name, backend,
                                       lambda boot: _merge_into_iceberg(stack, cluster, boot, tmp_path))
    assert _metadata(warehouse, name, schema, "added") is None  # the first run knew nothing of it
    _merge_into_iceberg(stack, cluster, boot, tmp_path)
    merged = StaticTable.from_metadata(str(_metadata(warehouse, name, schema, "added"))).scan().to_arrow()
    src = source_rows(stack.dsn, schema, "added", ADDED)
    state = _by_id(merged.to_pylist())
    assert len(state) == len(src) and state == src, (len(state), len(src))
    for t in TABLES:
        assert iceberg_rows(warehouse, name, schema, t) == source_rows(stack.dsn, schema, t)


@pytest.mark.spark_job
def test_a_table_added_while_the_iceberg_stream_runs_is_merged_without_a_restart(stack, db, schema, cluster,
                                                                                 relay_factory, spark, tmp_path):
    """spark/materialize.py --format iceberg as a long-running stream, started before the upgrade:
    it creates the added table's Iceberg table and merges it whole without being restarted."""
    warehouse, log, jobs = tmp_path / "warehouse", tmp_path / "mat.log", []

    def start(boot) -> None:
        jobs.append(subprocess.Popen(
            [sys.executable, "spark/materialize.py", "--bootstrap", str(boot), "--format", "iceberg", "--catalog",
             f"hadoop:{warehouse}", "--stream", "--checkpoint", str(tmp_path / "ckpt"), "--trigger-seconds", "1",
             "--master", "local[2]"], cwd=REPO, env=cli_env(stack, cluster), stdout=log.open("w"),
            stderr=subprocess.STDOUT))
        until(lambda: _metadata(warehouse, "maw", schema, "branches") is not None or jobs[0].poll() is not None,
              "the Iceberg tables to be created", 300, 0.5)

    try:
        _bootstrap_then_add_a_table(stack, db, schema, cluster, relay_factory, spark, tmp_path, "maw", "trigger", start)
        src = source_rows(stack.dsn, schema, "added", ADDED)

        def merged() -> dict:
            meta = _metadata(warehouse, "maw", schema, "added")
            return {} if meta is None else _by_id(StaticTable.from_metadata(str(meta)).scan().to_arrow().to_pylist())
        copied = {t: source_rows(stack.dsn, schema, t) for t in TABLES}

        def equal() -> bool:
            return merged() == src and all(iceberg_rows(warehouse, "maw", schema, t) == copied[t] for t in TABLES)
        until(lambda: jobs[0].poll() is not None or equal(), "every table merged whole", 600, 0.5)
        assert jobs[0].poll() is None, log.read_text()[-5000:]
        assert "gained table(s)" in log.read_text()
    finally:
        for job in jobs:
            job.kill()
            job.wait(60)
