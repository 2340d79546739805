"""materialize after a set upgrade: a table added to the set after the bootstrap gets its old rows
from the upgrade's online snapshot (snapshot rows the bootstrap does not hold are applied, not
skipped: pgshovel2.txids.holds_snapshot_row), its changes from the stream."""

import pyarrow.parquet as pq
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up, pgshovel, write_config
from tests.integration.bootstrap_helpers import TABLES, create_set, create_tables, parquet_rows, source_rows
from tests.online import start_writers, stop_writers, wait_state

ROWS = 3000
ADDED = ["id", "n", "s"]


def _added_state(output, schema: str) -> dict:
    data = pq.read_table(str(materialize.current_state(output) / "tables" / bootstrap.table_dir(schema, "added")),
                         columns=ADDED).to_pylist()
    return {r["id"]: tuple(r[c] for c in ADDED) for r in data}


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_a_table_added_after_the_bootstrap_is_materialized_whole(stack, db, schema, cluster, relay_factory, spark,
                                                                 tmp_path, backend):
    create_tables(db, schema, accounts=500)
    create_set(stack, cluster, tmp_path, schema, "mad", backend=backend)
    added = f'"{schema}".added'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {added} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {added} SELECT g, 0, 'old' FROM generate_series(1, %s) g", (ROWS,))
    relay_factory("mad").wait_for("snapshot done")
    boot = tmp_path / "boot"
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, "mad", bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry))
    stop, threads = start_writers(stack.dsn, added, ROWS)
    try:
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": t} for t in [*TABLES, "added"]],
                           backend=backend)
        pgshovel(stack, cluster, "set", "upgrade", "mad", str(cfg))
        wait_state(stack, cluster, "mad", "done")
    finally:
        stop_writers(stop, threads)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".branches SET note = \'after upgrade\' WHERE bid = 3')
    caught_up(stack, cluster, "mad")
    options = materialize.MaterializeOptions(str(boot), str(tmp_path / "out"), stack.bootstrap, stack.registry,
                                             zookeeper_hosts=stack.zk, cluster=cluster)
    materialize.run(spark, options)
    src = source_rows(stack.dsn, schema, "added", ADDED)
    state = _added_state(tmp_path / "out", schema)
    assert len(state) == len(src) and state == src, (len(state), len(src))
    current = materialize.current_state(tmp_path / "out") / "tables"
    for t in TABLES:  # the copied tables: bootstrap + stream, their snapshot rows not applied twice
        assert parquet_rows(current / bootstrap.table_dir(schema, t), t) == source_rows(stack.dsn, schema, t)
