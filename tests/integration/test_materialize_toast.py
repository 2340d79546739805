"""materialize keeps the values an UPDATE left unchanged and unlogged (logical backend, REPLICA
IDENTITY DEFAULT, 1 MiB values: header pgshovel.unchanged), also across UPDATEs of the key: the
moved row keeps the old key's value, through chains of moves, onto a key deleted before, from an
old key created in the same batch, from the new life of a re-inserted key, and (second run) from
an old key only the materialized state holds; Parquet also from a debezium set (Debezium's placeholder
in the unchanged fields, the header naming them). Parquet (in this process's Spark) and Iceberg
(spark/materialize.py, its own JVM; the old key's value lent by the Iceberg table) both equal the
source after each run."""

import hashlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pgshovel2 import names
from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import spark as spark_codec
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up, messages, pgshovel, write_config
from tests.integration.bootstrap_helpers import merge_into_iceberg
from tests.integration.test_iceberg import iceberg_rows
from tests.integration.unchanged_toast import BIG, rows

FIRST = [  # each its own transaction, all relayed before the first run
    "UPDATE {t} SET n = n + 1",                                # unchanged on every row
    "UPDATE {t} SET id = 20, n = 20 WHERE id = 2",             # a move; the old key from the bootstrap
    "UPDATE {t} SET id = 21 WHERE id = 20",                    # a chain: 2 -> 20 -> 21 -> 22
    "UPDATE {t} SET id = 22 WHERE id = 21",
    "INSERT INTO {t} VALUES (8, 8, {big})",                    # the old key created in the batch
    "UPDATE {t} SET id = 80 WHERE id = 8",
    "DELETE FROM {t} WHERE id = 6",                            # moved onto a key deleted before:
    "UPDATE {t} SET id = 6 WHERE id = 7",                      # 7's value, not the old 6's
    "DELETE FROM {t} WHERE id = 5",                            # the new life of a key
    "INSERT INTO {t} VALUES (5, 50, {big})",
    "UPDATE {t} SET id = 50 WHERE id = 5",
    "UPDATE {t} SET n = 3 WHERE id = 3; UPDATE {t} SET id = 30 WHERE id = 3; UPDATE {t} SET id = 31 WHERE id = 30",
]
SECOND = [  # after the first run: the old keys are only in the materialized state
    "UPDATE {t} SET id = 23 WHERE id = 22",
    "UPDATE {t} SET n = 9 WHERE id = 23",
    "UPDATE {t} SET id = 10 WHERE id = 1; UPDATE {t} SET id = 1, n = 1 WHERE id = 4",  # one transaction
]


def _set_up(stack, cluster, db, schema, tmp_path, relay_factory, spark, set_name: str, **wire):
    t = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int, big text)")
        cur.execute(f"INSERT INTO {t} SELECT i, 0, {BIG} FROM generate_series(1, 7) AS i")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend="logical",
                       topic_prefix=f"{set_name}{cluster}", **wire)
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY DEFAULT")  # write_config set FULL
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay_factory(set_name).wait_for("snapshot done")
    boot = tmp_path / "boot"
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, set_name, bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry))
    return t, boot


def _write(stack, cluster, db, set_name: str, t: str, statements: list[str]) -> dict:
    """Run statements, wait until relayed; the table's rows. Asserts that some UPDATE of the key was
    relayed without its big value (header pgshovel.unchanged on an op c message)."""
    for statement in statements:
        with db.cursor() as cur:
            cur.execute(statement.format(t=t, big=BIG))
    caught_up(stack, cluster, set_name, timeout=180)
    schema, name = (p.strip('"') for p in t.split("."))
    got = messages(stack, names.table_topic(f"{set_name}{cluster}", schema, name))
    assert any(h.get("pgshovel.op") == "c" and h.get("pgshovel.unchanged") == '["big"]' for _, _, h in got)
    return rows(db, t)


def _digest(values: dict) -> dict:
    """id -> (n, md5(big), length(big)) of id -> (n, big)."""
    return {k: (n, hashlib.md5(big.encode()).hexdigest(), len(big)) for k, (n, big) in values.items()}


def _parquet(output, schema: str) -> dict:
    current = materialize.current_state(output)
    data = pq.read_table(str(current / "tables" / bootstrap.table_dir(schema, "t"))).to_pylist()
    return _digest({r["id"]: (r["n"], r["big"]) for r in data})


def _past_the_end(spark, boot, options, schema: str) -> list[tuple]:
    """(op, id) of the changes the job's beyond reads after its last micro-batch's end offsets."""
    job = materialize._Job(spark, Manifest.load(str(boot)), options)
    last = max(int(p.name) for p in (Path(options.checkpoint) / "offsets").iterdir() if p.name.isdigit())
    [topic] = [t.topic for t in job.topics.tables]
    table = job.tables[(schema, "t")]
    rows = job.beyond(topic, table, spark_codec.columns(table), last)().collect()
    return sorted((r["__pgshovel_op"], r["id"]) for r in rows)


# debezium: Debezium's placeholder in the unchanged fields, before null or the key only (the header
# names the unchanged columns as in the row envelope)
@pytest.mark.parametrize("wire", [{}, {"envelope": "debezium", "encoding": "json"}], ids=["row", "debezium"])
def test_parquet_materialize_carries_unchanged_values_over_key_moves(stack, cluster, db, schema, tmp_path,
                                                                      relay_factory, spark, wire):
    t, boot = _set_up(stack, cluster, db, schema, tmp_path, relay_factory, spark, "mtoast", **wire)
    options = materialize.MaterializeOptions(str(boot), str(tmp_path / "out"), stack.bootstrap, stack.registry,
                                             stream=True, checkpoint=str(tmp_path / "ckpt"), available_now=True)
    first = _write(stack, cluster, db, "mtoast", t, FIRST)
    materialize.run(spark, options)
    assert _parquet(tmp_path / "out", schema) == first
    assert sorted(first) == [1, 4, 6, 22, 31, 50, 80]
    second = _write(stack, cluster, db, "mtoast", t, SECOND)
    beyond = [("c", 1), ("c", 10), ("c", 23), ("d", 1), ("d", 4), ("d", 22), ("u", 23)]
    if wire:  # debezium: each d event and its tombstone
        beyond = sorted(beyond + [r for r in beyond if r[0] == "d"])
    assert _past_the_end(spark, boot, options, schema) == beyond
    materialize.run(spark, options)
    assert _parquet(tmp_path / "out", schema) == second != first


@pytest.mark.spark_job
def test_iceberg_materialize_carries_unchanged_values_over_key_moves(stack, cluster, db, schema, tmp_path,
                                                                      relay_factory, spark):
    t, boot = _set_up(stack, cluster, db, schema, tmp_path, relay_factory, spark, "itoast")
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "ckpt"

    def iceberg() -> dict:
        got = iceberg_rows(warehouse, "itoast", schema, "t", ["id", "n", "big"])
        return _digest({k: (n, big) for k, (_, n, big) in got.items()})

    first = _write(stack, cluster, db, "itoast", t, FIRST)
    merge_into_iceberg(stack, cluster, boot, warehouse, checkpoint)
    assert iceberg() == first
    second = _write(stack, cluster, db, "itoast", t, SECOND)
    merge_into_iceberg(stack, cluster, boot, warehouse, checkpoint)
    assert iceberg() == second != first
