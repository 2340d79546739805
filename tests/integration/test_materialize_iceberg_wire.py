"""materialize --format iceberg (spark/materialize.py as a user runs it, local[2]) reads every
encoding and envelope: every type of test_types' list, written after a bootstrap, then a column
added by DDL and then renamed (new set versions: a JSON set's columns come from them), equals
what a bootstrap of the source taken afterwards copies, read back from Iceberg by PyIceberg."""

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable

from tests.helpers import caught_up
from tests.integration.bootstrap_helpers import merge_into_iceberg
from tests.integration.test_iceberg import _metadata
from tests.integration.test_materialize_wire import CONNECT_LOSSY, WIRES, _bootstrap, _rows_of, typed_set
from tests.integration.test_types import insert_rows, typed_table  # noqa: F401  (a fixture)

# in make test-spark (a JVM each: about a minute); make test merges into Iceberg in test_audit_iceberg
ICEBERG_WIRES = [pytest.param(e, v, id=f"{e}-{v}", marks=[pytest.mark.spark_job]) for e, v in WIRES]


@pytest.mark.parametrize(("encoding", "envelope"), ICEBERG_WIRES)
def test_every_type_merges_into_iceberg_as_the_source(stack, cluster, db, typed_table, relay_factory,  # noqa: F811
                                                      spark, tmp_path, encoding, envelope):
    schema = typed_table
    name = f"mi{encoding[0]}{envelope[0]}"
    typed_set(stack, cluster, relay_factory, spark, tmp_path, schema, name, encoding, envelope)
    insert_rows(db, schema)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".types SET i4 = 5, t = \'updated\' WHERE id = 1')
        cur.execute(f'DELETE FROM "{schema}".types WHERE id = 3')
    with db.cursor() as cur:  # new set versions mid-stream: a column added, then renamed
        cur.execute(f'ALTER TABLE "{schema}".types ADD COLUMN extra text')
        cur.execute(f'UPDATE "{schema}".types SET extra = \'x\' WHERE id = 2')
        cur.execute(f'ALTER TABLE "{schema}".types RENAME COLUMN extra TO renamed')
        cur.execute(f'UPDATE "{schema}".types SET renamed = \'y\' WHERE id = 1')
    caught_up(stack, cluster, name)
    warehouse = tmp_path / "warehouse"
    merge_into_iceberg(stack, cluster, tmp_path / "before", warehouse, tmp_path / "ckpt")
    after = _bootstrap(spark, stack, cluster, name, tmp_path / "after")
    source = _rows_of(pq.read_table(after.table_path(tmp_path / "after", after.tables[0])))
    merged = StaticTable.from_metadata(str(_metadata(warehouse, name, schema, "types"))).scan().to_arrow()
    state = _rows_of(merged)
    assert [r["id"] for r in source] == [1, 2] and [r["renamed"] for r in source] == ["y", "x"]
    assert [r["id"] for r in state] == [1, 2]
    lossy = CONNECT_LOSSY if envelope == "debezium" else set()  # Debezium's Connect forms: docs/wire.rst
    for got, want in zip(state, source, strict=True):
        differing = {k: (got.get(k), want[k]) for k in want if got.get(k) != want[k]}
        assert set(differing) <= lossy, differing
