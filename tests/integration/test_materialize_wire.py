"""materialize reads every encoding and envelope: every type of test_types' list, written after a
bootstrap and relayed as JSON or Avro, row or Debezium envelope, materializes to exactly what a
bootstrap of the source taken afterwards copies (the same Spark types and values)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from pgshovel2.sparkjobs.changes import POSITION
from tests.helpers import caught_up, pgshovel, write_config
from tests.integration.test_types import COLUMNS, insert_rows, typed_table  # noqa: F401  (a fixture)

# json-debezium, avro-debezium: Debezium's Kafka Connect schemas (the default); *-debezium-schemaless:
# debezium: {schemas: false}
WIRES = [("json", "row"), ("avro", "debezium"), ("avro", "debezium-schemaless"), ("json", "debezium"),
         ("json", "debezium-schemaless")]
# What Debezium's Connect forms do not keep (docs/wire.rst): timetz offsets (the instant is kept),
# interval months/days (µs only), numeric NaN (null under decimal.handling.mode=precise), hstore's
# text (a JSON object's, io.debezium.data.Json) and a bit string's leading zeros (io.debezium.data.Bits)
CONNECT_LOSSY = {"tz", "atz", "iv", "aiv", "nu", "hs", "bt"}


def _bootstrap(spark, stack, cluster: str, set_name: str, output) -> Manifest:
    with ClusterStore(stack.zk, cluster) as store:
        return bootstrap.run(spark, store, set_name, bootstrap.BootstrapOptions(str(output), stack.bootstrap,
                                                                                stack.registry))


def typed_set(stack, cluster: str, relay_factory, spark, tmp_path, schema: str, name: str, encoding: str,
              envelope: str) -> Manifest:
    """Set name over the typed table (test_types) with that wire, its snapshot relayed and its
    bootstrap (of the empty table) taken into tmp_path / 'before'."""
    extra = {"debezium": {"schemas": False}} if envelope == "debezium-schemaless" else {}
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "types"}], encoding=encoding,
                       envelope=envelope.removesuffix("-schemaless"), **extra)
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    relay_factory(name).wait_for("snapshot done")
    return _bootstrap(spark, stack, cluster, name, tmp_path / "before")


def _as_numbers(kind: pa.DataType) -> pa.DataType:
    """Dates and timestamps as their numbers (±infinity are out of Python's datetime range)."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_as_numbers(kind.value_type))
    if pa.types.is_date32(kind):
        return pa.int32()
    return pa.int64() if pa.types.is_timestamp(kind) else kind


def _rows(path) -> list[dict]:
    """The rows of a Parquet dataset by id, NaN as the string 'NaN' (NaN != NaN)."""
    return _rows_of(pq.read_table(str(path)))


def _rows_of(table: pa.Table) -> list[dict]:
    """:func:`_rows` of an Arrow table."""
    rows = table.cast(pa.schema([pa.field(f.name, _as_numbers(f.type)) for f in table.schema])).to_pylist()
    return sorted(({k: ("NaN" if isinstance(v, float) and v != v else v) for k, v in r.items() if k != POSITION}
                   for r in rows), key=lambda r: r["id"])


@pytest.mark.parametrize(("encoding", "envelope"), WIRES, ids=[f"{e}-{v}" for e, v in WIRES])
def test_every_type_materializes_as_the_source(stack, cluster, db, typed_table, relay_factory, spark,  # noqa: F811
                                               tmp_path, encoding, envelope):
    schema = typed_table
    name = f"mw{encoding[0]}{envelope[0]}{'s' if envelope.endswith('-schemaless') else ''}"
    before = typed_set(stack, cluster, relay_factory, spark, tmp_path, schema, name, encoding, envelope)
    insert_rows(db, schema)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".types SET i4 = 5, t = \'updated\' WHERE id = 1')
        cur.execute(f'INSERT INTO "{schema}".types (id, b) VALUES (4, true)')
        cur.execute(f'DELETE FROM "{schema}".types WHERE id = 4')
    caught_up(stack, cluster, name)
    materialize.run(spark, materialize.MaterializeOptions(str(tmp_path / "before"), str(tmp_path / "out"),
                                                          stack.bootstrap, stack.registry))
    after = _bootstrap(spark, stack, cluster, name, tmp_path / "after")
    state = _rows(materialize.current_state(tmp_path / "out") / "tables" / bootstrap.table_dir(schema, "types"))
    source = _rows(after.table_path(tmp_path / "after", after.tables[0]))
    assert before.tables[0].rows == 0 and len(source) == 3
    assert [r["id"] for r in state] == [1, 2, 3]
    lossy = CONNECT_LOSSY if envelope == "debezium" else set()  # Debezium's Connect forms, JSON and Avro
    for got, want in zip(state, source, strict=True):
        differing = {k: (got.get(k), want[k]) for k in want if got.get(k) != want[k]}
        assert set(differing) <= lossy, differing
    assert {c for c, _, _ in COLUMNS} <= set(source[0])
