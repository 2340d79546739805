"""The Spark bootstrap against the real stack: a consistent parallel copy taken while writers run,
handed off exactly to the stream (snapshot + stream == source), Parquet types, the op=r Kafka
output, and the bad cases (no partial output that looks complete)."""

import datetime
import decimal
import json
import threading
import uuid

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgshovel2.backends.snapshot import APPLICATION_NAME
from pgshovel2.bootstrap.manifest import BootstrapError, Manifest
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec.connect import unwrap
from pgshovel2.ops.verify import read_topics
from pgshovel2.sparkjobs import bootstrap, session
from pgshovel2.txids import ConsistentPoint
from tests.helpers import caught_up, kafka_partitions, pgshovel, read_partitioned, write_config
from tests.integration.bootstrap_helpers import (
    TABLES,
    Writer,
    apply_stream,
    create_set,
    create_tables,
    parquet_rows,
    source_rows,
)


def _run(spark, stack, cluster: str, set_name: str, output, **options) -> Manifest:
    opts = bootstrap.BootstrapOptions(str(output), stack.bootstrap, stack.registry, **options)
    with ClusterStore(stack.zk, cluster) as store:
        return bootstrap.run(spark, store, set_name, opts)


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_snapshot_plus_stream_equals_source_under_writes(stack, db, schema, cluster, relay_factory, spark,
                                                         tmp_path, backend):
    create_tables(db, schema)
    create_set(stack, cluster, tmp_path, schema, "boot", backend)
    relay = relay_factory("boot")
    relay.wait_for("snapshot done")
    writer = Writer(stack.dsn, schema)
    writer.start()
    try:
        while writer.transactions < 20:  # the writes are well under way before the snapshot
            threading.Event().wait(0.01)
        manifest = _run(spark, stack, cluster, "boot", tmp_path / "boot", partition_rows=500)
        during = writer.transactions
        while writer.transactions < during + 20:  # and go on after it
            threading.Event().wait(0.01)
    finally:
        writer.finish()
    assert writer.transactions > during > 20
    caught_up(stack, cluster, "boot")

    accounts = next(t for t in manifest.tables if t.name == "accounts")
    assert accounts.partitions >= 3  # key ranges from reltuples / min-max, all under one snapshot
    state = {t: parquet_rows(manifest.table_path(tmp_path / "boot", c), t)
             for t in TABLES for c in manifest.tables if c.name == t}
    assert {t: len(rows) for t, rows in state.items()} == {c.name: c.rows for c in manifest.tables}
    reader = apply_stream(state, tmp_path / "boot", stack)
    assert reader.skipped_visible > 0  # the handoff filter was exercised: changes already in the copy
    for table in TABLES:
        assert state[table] == source_rows(stack.dsn, schema, table), table
    assert Manifest.load(tmp_path / "boot").handoff == manifest.handoff
    assert manifest.handoff["backend"] == backend and ("lsn" if backend == "logical" else "txid_snapshot") in \
        manifest.handoff
    assert set(manifest.kafka_offsets) == {f"boot.{schema}.accounts", f"boot.{schema}.branches",
                                           "boot.transactions"}


TYPES = """
CREATE TABLE "{s}".typed (
  id int8 PRIMARY KEY, b bool, i2 int2, f8 float8, n numeric(10,2), nu numeric, t text, by bytea, u uuid,
  d date, ts timestamp, tz timestamptz, tm time, j jsonb, ia int[], da date[]
);
INSERT INTO "{s}".typed VALUES
  (1, true, 7, 'NaN', 12345678.91, 0.1000000000000000000000000001, 'héllo 🐘', '\\x00ff00',
   '6ecd8c99-4036-403d-bf84-cf8400f67836',
   '2024-02-29', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789012+02', '23:59:59.999999', '{{"a": [1, null]}}',
   '{{1,NULL,3}}', '{{2024-01-01,NULL}}'),
  (2, NULL, NULL, 1.5, -0.01, NULL, NULL, NULL, NULL, 'infinity', '-infinity', 'infinity', NULL, NULL, NULL, NULL);
"""


def test_parquet_types_follow_the_wire_mapping(stack, db, schema, cluster, relay_factory, spark, tmp_path):
    with db.cursor() as cur:
        cur.execute(TYPES.format(s=schema))
    config = write_config(tmp_path, stack, [{"schema": schema, "name": "typed"}])
    pgshovel(stack, cluster, "set", "create", "typed", str(config))
    relay_factory("typed").wait_for("snapshot done")
    manifest = _run(spark, stack, cluster, "typed", tmp_path / "typed")
    table = pq.read_table(manifest.table_path(tmp_path / "typed", manifest.tables[0])).sort_by("id")
    schema_types = {f.name: str(f.type) for f in table.schema}
    assert schema_types == {"id": "int64", "b": "bool", "i2": "int32", "f8": "double",
                            "n": "decimal128(10, 2)", "nu": "string", "t": "string", "by": "binary",
                            "u": "string", "d": "date32[day]", "ts": "timestamp[us]",
                            "tz": "timestamp[us, tz=UTC]", "tm": "int64", "j": "string",
                            "ia": "list<element: int32>", "da": "list<element: date32[day]>"}
    first = {c: table.column(c)[0].as_py() for c in table.column_names if c not in ("f8",)}
    assert first == {
        "id": 1, "b": True, "i2": 7, "n": decimal.Decimal("12345678.91"), "nu": "0.1000000000000000000000000001",
        "t": "héllo 🐘", "by": b"\x00\xff\x00", "u": str(uuid.UUID("6ecd8c99-4036-403d-bf84-cf8400f67836")),
        "d": datetime.date(2024, 2, 29), "ts": datetime.datetime(2024, 2, 29, 12, 34, 56, 789012),
        "tz": datetime.datetime(2024, 2, 29, 10, 34, 56, 789012, tzinfo=datetime.UTC),
        "tm": 86399999999, "j": '{"a": [1, null]}', "ia": [1, None, 3], "da": [datetime.date(2024, 1, 1), None]}
    assert str(table.column("f8")[0].as_py()) == "nan"
    # ±infinity keep WIRE.md's sentinels: int32 / int64 max and min
    assert table.column("d").cast(pa.int32())[1].as_py() == 2**31 - 1
    assert table.column("ts").cast(pa.int64())[1].as_py() == -(2**63)
    assert table.column("tz").cast(pa.int64())[1].as_py() == 2**63 - 1
    assert manifest.tables[0].rows == 2 and int(manifest.tables[0].checksum) != 0


def test_to_kafka_writes_the_relays_own_snapshot_messages(stack, db, schema, cluster, relay_factory, spark,
                                                          tmp_path):
    create_tables(db, schema, accounts=300)
    create_set(stack, cluster, tmp_path, schema, "tokafka")
    relay_factory("tokafka").wait_for("snapshot done")
    topic = f"tokafka.{schema}.accounts"
    relayed = read_topics(stack.bootstrap, [topic])[topic]
    manifest = _run(spark, stack, cluster, "tokafka", tmp_path / "k", to_kafka=True, partition_rows=100)
    assert manifest.output == "kafka" and not (tmp_path / "k" / "tables").exists()
    both = read_topics(stack.bootstrap, [topic])[topic]
    ours = both[len(relayed):]
    assert len(relayed) == len(ours) == 300
    assert next(t.rows for t in manifest.tables if t.name == "accounts") == 300

    def messages(msgs):
        return sorted((k, v, dict(h)["pgshovel.op"]) for k, v, h in msgs)
    assert messages(ours) == messages(relayed)  # same keys, same value bytes, op r
    assert all(dict(h)["pgshovel.set"] == "tokafka" for _, _, h in ours)


def test_to_kafka_debezium_snapshot_markers_and_lsn(stack, db, schema, cluster, relay_factory, spark, tmp_path):
    """--to-kafka on a logical debezium set: the bootstrap's op r events carry Debezium's snapshot markers
    over all its tables (first ... last) and its handoff slot's consistent point as source.lsn."""
    create_tables(db, schema, accounts=30)
    config = write_config(tmp_path, stack, [{"schema": schema, "name": t} for t in TABLES], encoding="json",
                          backend="logical", envelope="debezium")
    pgshovel(stack, cluster, "set", "create", "dbzboot", str(config))
    relay_factory("dbzboot").wait_for("snapshot done")
    topics = [f"dbzboot.{schema}.{t}" for t in TABLES]
    relayed = {t: len(m) for t, m in read_topics(stack.bootstrap, topics).items()}
    manifest = _run(spark, stack, cluster, "dbzboot", tmp_path / "k", to_kafka=True, partition_rows=10)
    after = read_topics(stack.bootstrap, topics)
    messages = [json.loads(v) for t in topics for _, v, _ in after[t][relayed[t]:]]  # tables in set order
    assert all(m["schema"]["name"].endswith(".Envelope") for m in messages)  # Connect's JSON with schema
    ours = [unwrap(m) for m in messages]
    assert [e["op"] for e in ours] == ["r"] * 40
    assert [e["source"]["snapshot"] for e in ours] == (
        ["first"] + ["true"] * 28 + ["last_in_data_collection", "first_in_data_collection"] + ["true"] * 8 + ["last"])
    lsn = int(ConsistentPoint.parse(manifest.handoff["lsn"]).lsn)
    assert {(e["source"]["lsn"], e["source"]["sequence"], e["source"]["txId"]) for e in ours} == {
        (lsn, f'[null,"{lsn}"]', None)}
    assert [t.rows for t in manifest.tables] == [30, 10] and all(int(t.checksum) for t in manifest.tables)


def test_to_kafka_partitions_keys_as_kafka_does(stack, db, schema, cluster, relay_factory, spark, tmp_path):
    create_tables(db, schema, accounts=400)
    create_set(stack, cluster, tmp_path, schema, "kpart", encoding="json", topics={"partitions": 6})
    relay_factory("kpart").wait_for("snapshot done")
    _run(spark, stack, cluster, "kpart", tmp_path / "kp", to_kafka=True, partition_rows=100)
    for table, rows in (("accounts", 400), ("branches", 10)):
        got = read_partitioned(stack.bootstrap, f"kpart.{schema}.{table}")
        assert len(got) == 2 * rows  # the relay's snapshot, then the bootstrap's op r copy
        expected = kafka_partitions([k for _, k, _ in got], 6)
        assert [p for p, _, _ in got] == [p for _, p in expected], table


def test_bad_cases_leave_no_output(stack, db, schema, cluster, relay_factory, spark, tmp_path):
    create_tables(db, schema, accounts=50)
    create_set(stack, cluster, tmp_path, schema, "bad")
    with pytest.raises(BootstrapError, match="relay of set 'bad' has not started"):
        _run(spark, stack, cluster, "bad", tmp_path / "a")
    relay_factory("bad").wait_for("snapshot done")

    with pytest.raises(BootstrapError, match="JDBC driver not found at /nonexistent/postgresql.jar"):
        session.jars("/nonexistent/postgresql.jar")
    proc = pgshovel(stack, cluster, "bootstrap", "bad", "--output", str(tmp_path / "b"),
                    "--jdbc-jar", "/nonexistent/postgresql.jar", check=False)
    assert proc.returncode == 1 and "JDBC driver not found" in proc.stderr

    killer = _SnapshotKiller(stack.dsn)
    killer.start()
    with pytest.raises(BootstrapError, match="exporting transaction ended"):
        _run(spark, stack, cluster, "bad", tmp_path / "c")
    killer.join(10)
    assert killer.killed

    with db.cursor() as cur:
        cur.execute(f'ALTER TABLE "{schema}".branches RENAME TO branches_gone')
    with pytest.raises(BootstrapError, match=f'table "{schema}"."branches" of the set does not exist'):
        _run(spark, stack, cluster, "bad", tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".yaml")) == ["bad.log"]


class _SnapshotKiller(threading.Thread):
    """Terminates the bootstrap's exporting transaction as soon as it has exported its snapshot
    (its last statement exported it: killed before, it would fail to export, another error)."""

    def __init__(self, dsn: str):
        super().__init__(daemon=True)
        self.dsn, self.killed = dsn, False

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            for _ in range(2000):
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = %s AND state = 'idle in transaction' "
                            "AND query LIKE '%%pg_export_snapshot%%'", (APPLICATION_NAME,))
                if cur.fetchall():
                    self.killed = True
                    break
                threading.Event().wait(0.005)
        conn.close()


PLAIN = """CREATE TABLE "{s}".plain (id int PRIMARY KEY, b bool, i2 smallint, i8 bigint, f4 real,
  f8 double precision, t text, v varchar(10), c char(5), nm name, by bytea);
INSERT INTO "{s}".plain VALUES
  (1, true, -7, 9007199254740993, 'NaN', '-Infinity', 'héllo 🐘', 'v', 'ab', 'n', '\\x00ff00'),
  (2, false, 32767, -1, '1.1', 'Infinity', '', '', '', '', ''),
  (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"""


def test_plain_columns_read_natively_equal_the_encoded_rows(stack, db, schema, cluster, relay_factory, spark,
                                                            tmp_path, caplog):
    with db.cursor() as cur:
        cur.execute(PLAIN.format(s=schema))
    config = write_config(tmp_path, stack, [{"schema": schema, "name": "plain"}])
    pgshovel(stack, cluster, "set", "create", "plain", str(config))
    relay_factory("plain").wait_for("snapshot done")
    with caplog.at_level("INFO"):
        native = _run(spark, stack, cluster, "plain", tmp_path / "native")
    assert "read as plain columns" in caplog.text
    encoded = _run(spark, stack, cluster, "plain", tmp_path / "encoded", native=False)
    tables = [pq.read_table(m.table_path(tmp_path / d, m.tables[0])).sort_by("id")
              for m, d in ((native, "native"), (encoded, "encoded"))]
    assert tables[0].schema == tables[1].schema
    assert _nan_equal(tables[0], tables[1])
    assert native.tables[0].checksum == encoded.tables[0].checksum
    assert tables[0].column("c")[0].as_py() == "ab   "  # char(n) keeps its padding, as the trigger's rows


def _nan_equal(a: pa.Table, b: pa.Table) -> bool:
    """Row equality where NaN equals NaN."""
    def norm(rows: list) -> list:
        return [{k: ("nan" if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]
    return norm(a.to_pylist()) == norm(b.to_pylist())
