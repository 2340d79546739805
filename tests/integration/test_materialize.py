"""spark/materialize.py against the real stack: bootstrap Parquet + change stream (Kafka, read by
Spark's Kafka connector) == source tables, in batch mode and in Structured Streaming across a restart."""

import threading

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up
from tests.integration.bootstrap_helpers import TABLES, Writer, create_set, create_tables, parquet_rows, source_rows


def _state(output) -> dict:
    current = materialize.current_state(output)
    return {t: parquet_rows(current / "tables" / bootstrap.table_dir(schema_of(current), t), t) for t in TABLES}


def schema_of(current) -> str:
    return next((current / "tables").iterdir()).name.split(".")[0]


def _source(stack, schema: str) -> dict:
    return {t: source_rows(stack.dsn, schema, t) for t in TABLES}


def _writes(stack, schema: str, seed: int, at_least: int, during=None) -> None:
    writer = Writer(stack.dsn, schema, seed)
    writer.start()
    try:
        while writer.transactions < at_least:
            threading.Event().wait(0.01)
        if during is not None:
            during()
            target = writer.transactions + at_least
            while writer.transactions < target:
                threading.Event().wait(0.01)
    finally:
        writer.finish()


def test_materialize_batch_and_stream_equal_the_source(stack, db, schema, cluster, relay_factory, spark, tmp_path):
    create_tables(db, schema)
    create_set(stack, cluster, tmp_path, schema, "mat")
    relay_factory("mat").wait_for("snapshot done")
    boot = tmp_path / "boot"

    def take_bootstrap():
        opts = bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry, partition_rows=700)
        with ClusterStore(stack.zk, cluster) as store:
            bootstrap.run(spark, store, "mat", opts)

    _writes(stack, schema, seed=2, at_least=30, during=take_bootstrap)
    caught_up(stack, cluster, "mat")

    def options(output, **extra):
        return materialize.MaterializeOptions(str(boot), str(output), stack.bootstrap, stack.registry, **extra)

    materialize.run(spark, options(tmp_path / "batch"))
    expected = _source(stack, schema)
    assert _state(tmp_path / "batch") == expected

    streamed = options(tmp_path / "stream", stream=True, checkpoint=str(tmp_path / "ckpt"), available_now=True)
    materialize.run(spark, streamed)
    assert _state(tmp_path / "stream") == expected

    _writes(stack, schema, seed=3, at_least=40)
    with db.cursor() as cur:  # a TRUNCATE, then rows again
        cur.execute(f'TRUNCATE "{schema}".branches')
        cur.execute(f'INSERT INTO "{schema}".branches VALUES (100, 1, \'after truncate\'), (7, 2, NULL)')
    caught_up(stack, cluster, "mat")
    materialize.run(spark, streamed)  # a restart: resumes from its checkpoint
    after = _source(stack, schema)
    assert after != expected
    assert _state(tmp_path / "stream") == after
    assert sorted(after["branches"]) == [7, 100]
