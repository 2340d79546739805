"""materialize (Parquet) keeps a keyless table (``allow_unkeyed``, issue #66) as the multiset it is:
after a bootstrap, duplicate rows, one of two equal rows deleted, one of two equal rows updated
(NULLs, NaN and -0.0 among the values), a no-op UPDATE, in the row and the Debezium envelope;
then, across a restart of the streaming job, a TRUNCATE and more of the same."""

import math
from collections import Counter

import pyarrow.parquet as pq
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.helpers import caught_up, pgshovel, write_config

ONE = "ctid = (SELECT ctid FROM {t} WHERE msg IS NOT DISTINCT FROM %s LIMIT 1)"
WIRES = [("avro", "row"), ("json", "debezium")]


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0 and math.copysign(1, value) < 0:
        return "-0.0"
    return value


def _source(db, t: str) -> Counter:
    with db.cursor() as cur:
        cur.execute(f"SELECT msg, n, f FROM {t}")
        return Counter(tuple(map(_norm, row)) for row in cur.fetchall())


def _state(output, schema: str) -> Counter:
    path = materialize.current_state(output) / "tables" / bootstrap.table_dir(schema, "k")
    return Counter(tuple(_norm(r[c]) for c in ("msg", "n", "f")) for r in pq.read_table(str(path)).to_pylist())


def _changes(db, t: str) -> None:
    one = ONE.format(t=t)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} VALUES ('c', 3, 'NaN'), ('c', 3, 'NaN'), (NULL, NULL, NULL), (NULL, NULL, NULL),"
                    " ('z', 0, '-0')")
        cur.execute(f"DELETE FROM {t} WHERE {one}", ("a",))              # one of two equal rows
        cur.execute(f"DELETE FROM {t} WHERE {one}", (None,))             # one of two rows of NULLs
        cur.execute(f"UPDATE {t} SET n = 30 WHERE {one}", ("c",))        # one of two equal rows (with NaN)
        cur.execute(f"UPDATE {t} SET n = n WHERE msg = 'b'")             # changes nothing


@pytest.mark.parametrize(("encoding", "envelope"), WIRES, ids=[f"{e}-{v}" for e, v in WIRES])
def test_materialize_keeps_a_keyless_table_as_a_multiset(stack, cluster, db, schema, relay_factory, spark,
                                                         tmp_path, encoding, envelope):
    t, name = f'"{schema}".k', f"mk{envelope[0]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (msg text, n int, f float8)")
        cur.execute(f"INSERT INTO {t} VALUES ('a', 1, 0.5), ('a', 1, 0.5), ('b', 2, NULL)")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "k", "allow_unkeyed": True}], encoding=encoding,
                       envelope=envelope)
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    relay_factory(name).wait_for("snapshot done")
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, name, bootstrap.BootstrapOptions(str(tmp_path / "boot"), stack.bootstrap,
                                                                     stack.registry))
    _changes(db, t)
    caught_up(stack, cluster, name)
    expected = _source(db, t)
    assert sum(expected.values()) == 6 and expected[("c", 3, "NaN")] == 1 and expected[(None, None, None)] == 1

    def options(output, **extra):
        return materialize.MaterializeOptions(str(tmp_path / "boot"), str(output), stack.bootstrap, stack.registry,
                                              **extra)

    materialize.run(spark, options(tmp_path / "batch"))
    assert _state(tmp_path / "batch", schema) == expected
    streamed = options(tmp_path / "stream", stream=True, checkpoint=str(tmp_path / "ckpt"), available_now=True)
    materialize.run(spark, streamed)
    assert _state(tmp_path / "stream", schema) == expected

    with db.cursor() as cur:
        cur.execute(f"TRUNCATE {t}")
        cur.execute(f"INSERT INTO {t} VALUES ('a', 1, 0.5), ('a', 1, 0.5), ('b', 2, NULL)")
    _changes(db, t)
    with db.cursor() as cur:
        cur.execute(f"DELETE FROM {t} WHERE {ONE.format(t=t)}", ("z",))
    caught_up(stack, cluster, name)
    materialize.run(spark, streamed)  # a restart: from its checkpoint, on its state's rows
    after = _source(db, t)
    assert after != expected and sum(after.values()) == 5
    assert _state(tmp_path / "stream", schema) == after
