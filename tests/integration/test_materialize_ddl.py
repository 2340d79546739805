"""The Parquet materialize job follows DDL mid-stream (new set versions), as the Iceberg one does:
an added column appears (null in older rows, or the value PostgreSQL gives them for a column
added with a DEFAULT: in the state's rows and in the batch's rows written before), a renamed one
keeps its values under the new name, a dropped one stays, null in the rows written after;
changes made before the DDL in the same micro-batch keep their values. Both encodings (JSON
reads the set versions from ZooKeeper)."""

import pyarrow.parquet as pq
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up
from tests.integration.bootstrap_helpers import create_set, create_tables, source_rows


def _state(output, schema: str) -> dict:
    current = materialize.current_state(output)
    data = pq.read_table(str(current / "tables" / bootstrap.table_dir(schema, "branches"))).to_pylist()
    return {r["bid"]: {k: v for k, v in r.items() if k != "__pgshovel_position"} for r in data}


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_parquet_materialize_follows_ddl(stack, db, schema, cluster, relay_factory, spark, tmp_path, encoding):
    create_tables(db, schema, accounts=10)
    name = f"mddl{encoding[0]}"
    create_set(stack, cluster, tmp_path, schema, name, encoding=encoding)
    relay_factory(name).wait_for("snapshot done")
    boot, t = tmp_path / "boot", f'"{schema}".branches'
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, name, bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry))
    options = materialize.MaterializeOptions(str(boot), str(tmp_path / "out"), stack.bootstrap, stack.registry,
                                             stream=True, checkpoint=str(tmp_path / "ckpt"), available_now=True,
                                             zookeeper_hosts=stack.zk, cluster=cluster)
    for statement in [f"UPDATE {t} SET note = 'before' WHERE bid = 5",     # same batch as the DDL below
                      f"ALTER TABLE {t} ADD COLUMN region text",
                      f"UPDATE {t} SET region = 'r1' WHERE bid = 1",
                      f"INSERT INTO {t} VALUES (11, 3, 'added after', 'west')",
                      f"ALTER TABLE {t} RENAME COLUMN note TO memo",
                      f"UPDATE {t} SET memo = 'renamed' WHERE bid = 2",
                      f"ALTER TABLE {t} ADD COLUMN tier int NOT NULL DEFAULT 7, ADD COLUMN label text DEFAULT 'n/a'",
                      f"UPDATE {t} SET tier = 8, label = NULL WHERE bid = 9",
                      f"ALTER TABLE {t} DROP COLUMN bbalance",
                      f"UPDATE {t} SET memo = 'dropped' WHERE bid = 3",
                      f"DELETE FROM {t} WHERE bid = 4"]:
        with db.cursor() as cur:
            cur.execute(statement)
    caught_up(stack, cluster, name)
    materialize.run(spark, options)
    columns = ["bid", "memo", "region", "tier", "label"]
    source = source_rows(stack.dsn, schema, "branches", columns)
    state = _state(tmp_path / "out", schema)
    assert {k: tuple(r[c] for c in columns) for k, r in state.items()} == source
    assert state[10]["label"] == "n/a" and state[5]["tier"] == 7 and state[9]["label"] is None
    assert state[5]["memo"] == "before" and state[1]["region"] == "r1" and state[11]["region"] == "west"
    assert state[3]["bbalance"] is None and state[2]["bbalance"] == 0  # written after / before the DROP
    assert "note" not in state[1]

    with db.cursor() as cur:  # a later batch on the evolved state
        cur.execute(f"UPDATE {t} SET region = 'r6', memo = 'later' WHERE bid = 6")
    caught_up(stack, cluster, name)
    materialize.run(spark, options)
    later = _state(tmp_path / "out", schema)
    assert {k: tuple(r[c] for c in columns) for k, r in later.items()} == source_rows(
        stack.dsn, schema, "branches", columns)
    assert later[6]["bbalance"] is None and later[7]["bbalance"] == 0
