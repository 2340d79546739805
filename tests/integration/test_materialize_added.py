"""materialize after a set upgrade: a table added to the set after the bootstrap gets its old rows
from the upgrade's online snapshot (snapshot rows the bootstrap does not hold are applied, not
skipped: pgshovel2.txids.holds_snapshot_row), its changes from the stream; Parquet and Iceberg."""

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up, pgshovel, write_config
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
