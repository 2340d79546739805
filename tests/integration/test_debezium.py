"""The debezium envelope against the real stack: every operation, a key update,
an unkeyed delete and snapshot rows, checked field by field against Debezium's
PostgreSQL change-event structure (before/after/source/op/ts_ms/transaction,
https://debezium.io/documentation/reference/stable/connectors/postgresql.html
"Data change events"), and the registered Avro value schema; optionally read
by Apache Flink's debezium-json format (PGSHOVEL_TEST_PYFLINK)."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import __version__, names
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import avro
from pgshovel2.ops.verify import read_topics
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config

ENVELOPE_FIELDS = ["before", "after", "source", "op", "ts_ms", "transaction"]
# Debezium's PostgreSQL source block (io.debezium.connector.postgresql.Source) minus
# sequence/xmin/ts_us/ts_ns, plus pgshovel's position.
SOURCE_FIELDS = ["version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table",
                 "txId", "lsn", "position"]
SET = "dbz"


def check_event(value: dict, op: str, before: dict | None, after: dict | None, table: str,
                schema: str, txid: int | None, window: tuple[int, int], order: tuple[int, int] | None):
    """One Debezium change event, field by field. order: (total_order, data_collection_order)."""
    assert list(value) == ENVELOPE_FIELDS
    assert (value["op"], value["before"], value["after"]) == (op, before, after)
    src = value["source"]
    assert list(src) == SOURCE_FIELDS
    assert src["version"] == __version__ and src["connector"] == "pgshovel" and src["name"] == SET
    assert (src["db"], src["schema"], src["table"]) == ("pgshovel", schema, table)
    assert src["lsn"] is None and src["txId"] == txid
    assert src["snapshot"] == ("true" if op == "r" else "false")
    assert window[0] <= src["ts_ms"] <= value["ts_ms"] <= window[1]
    if order is None:
        assert value["transaction"] is None
    else:
        assert value["transaction"] == {"id": str(txid), "total_order": order[0],
                                        "data_collection_order": order[1]}


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_debezium_envelope(stack, cluster, db, schema, tmp_path, relay_factory, encoding):
    prefix = f"dbz{encoding}{cluster}"
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".u (msg text)')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (1, \'existing\')')
        cur.execute(f'INSERT INTO "{schema}".u VALUES (\'old\')')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"},
                                         {"schema": schema, "name": "u", "allow_unkeyed": True}],
                       encoding=encoding, envelope="debezium", topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    started = int(time.time() * 1000)
    relay = relay_factory(SET)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t VALUES (2, \'two\'), (3, \'three\')')
        cur.execute("BEGIN")
        cur.execute("SELECT txid_current()")
        txid = cur.fetchone()[0]
        cur.execute(f'UPDATE "{schema}".t SET v = \'TWO\' WHERE id = 2')
        cur.execute(f'DELETE FROM "{schema}".t WHERE id = 3')
        cur.execute(f'UPDATE "{schema}".t SET id = 20 WHERE id = 2')
        cur.execute(f'INSERT INTO "{schema}".u VALUES (\'new\')')
        cur.execute(f'DELETE FROM "{schema}".u WHERE msg = \'old\'')
        cur.execute("COMMIT")
    caught_up(stack, cluster, SET)
    window = (started - 1000, int(time.time() * 1000))
    t_topic = names.table_topic(prefix, schema, "t")
    u_topic = names.table_topic(prefix, schema, "u")

    t_msgs = messages(stack, t_topic)
    assert [(k and k["id"], v is None, h["pgshovel.op"]) for k, v, h in t_msgs] == [
        (1, False, "r"), (2, False, "c"), (3, False, "c"),
        (2, False, "u"), (3, False, "d"), (3, True, "d"), (2, False, "d"), (2, True, "d"), (20, False, "c")]
    first_txid = int(t_msgs[1][2]["pgshovel.txid"])
    row = lambda i, v: {"id": i, "v": v}  # noqa: E731
    expected = [
        ("r", None, row(1, "existing"), None, None),
        ("c", None, row(2, "two"), first_txid, (1, 1)),
        ("c", None, row(3, "three"), first_txid, (2, 2)),
        ("u", row(2, "two"), row(2, "TWO"), txid, (1, 1)),  # old image, like REPLICA IDENTITY FULL
        ("d", row(3, "three"), None, txid, (2, 2)),     # the full old row (captured columns)
        ("d", row(2, "TWO"), None, txid, (3, 3)),       # key update: delete of the old key ...
        ("c", None, row(20, "TWO"), txid, (4, 4)),      # ... then create of the new key
    ]
    events = [(k, v, h) for k, v, h in t_msgs if v is not None]
    for (key, value, headers), (op, before, after, tx, order) in zip(events, expected, strict=True):
        check_event(value, op, before, after, "t", schema, tx, window, order)
        assert key == {"id": (after or before)["id"]}
        assert headers["pgshovel.op"] == op and headers["pgshovel.set"] == SET
        assert headers["pgshovel.txid"] == str(tx or 0)
        assert headers["pgshovel.position"] == value["source"]["position"]
    for i, (key, value, _) in enumerate(t_msgs):  # every tombstone follows its delete event
        if value is None:
            assert t_msgs[i - 1][1]["op"] == "d" and t_msgs[i - 1][0] == key

    u_msgs = messages(stack, u_topic)
    assert [(k, h["pgshovel.op"]) for k, _, h in u_msgs] == [(None, "r"), (None, "c"), (None, "d")]
    check_event(u_msgs[0][1], "r", None, {"msg": "old"}, "u", schema, None, window, None)
    check_event(u_msgs[1][1], "c", None, {"msg": "new"}, "u", schema, txid, window, (5, 1))
    check_event(u_msgs[2][1], "d", {"msg": "old"}, None, "u", schema, txid, window, (6, 2))

    txn = [v for _, v, _ in messages(stack, names.transactions_topic(prefix))]
    end = next(v for v in txn if v["type"] == "END" and v["txid"] == txid)
    assert end["event_count"] == 8  # 6 events and 2 tombstones
    assert {d["data_collection"]: d["event_count"] for d in end["data_collections"]} == {t_topic: 6, u_topic: 2}
    assert_verified(verify(stack, cluster, SET))

    with db.cursor() as cur:
        cur.execute(f'TRUNCATE "{schema}".t')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (7, \'after truncate\')')
    caught_up(stack, cluster, SET)
    assert [h["pgshovel.op"] for _, _, h in messages(stack, t_topic)[len(t_msgs):]] == ["c"]
    kinds = [v["type"] for _, v, _ in messages(stack, names.transactions_topic(prefix))]
    assert kinds.count("TRUNCATE") == 1
    assert_verified(verify(stack, cluster, SET))
    assert relay.stop() == 0

    if encoding == "avro":
        check_registered_schemas(stack, cluster, t_topic, u_topic)


def check_registered_schemas(stack, cluster: str, t_topic: str, u_topic: str) -> None:
    """The value subjects hold the Envelope record whose before/after is the row envelope's record."""
    client = SchemaRegistryClient({"url": stack.registry})
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(SET)
    tables = {t.name: t for t in record.tables}
    for topic, name in ((t_topic, "t"), (u_topic, "u")):
        registered = json.loads(client.get_latest_version(f"{topic}-value").schema.schema_str)
        assert registered["name"] == "Envelope"
        assert registered["namespace"] == f"pgshovel.{SET}.{names.avro_name(tables[name].schema)}.{name}"
        fields = {f["name"]: f for f in registered["fields"]}
        assert list(fields) == ENVELOPE_FIELDS
        row_schema = avro.value_schema(SET, tables[name])
        assert fields["before"]["type"] == ["null", row_schema] and fields["before"]["default"] is None
        assert fields["after"]["type"] == ["null", f"{row_schema['namespace']}.{row_schema['name']}"]
        assert fields["after"]["default"] is None
        assert fields["op"]["type"] == "string"
        assert fields["ts_ms"]["type"] == ["null", "long"]
        source = fields["source"]["type"]
        assert (source["namespace"], source["name"]) == ("pgshovel", "Source")
        assert [f["name"] for f in source["fields"]] == SOURCE_FIELDS
        nullable = {f["name"]: f["type"] for f in source["fields"] if isinstance(f["type"], list)}
        assert nullable == {"snapshot": ["string", "null"], "txId": ["null", "long"], "lsn": ["null", "long"]}
        block = fields["transaction"]["type"]
        assert block[0] == "null" and block[1]["name"] == "TransactionBlock"
        assert [(f["name"], f["type"]) for f in block[1]["fields"]] == [
            ("id", "string"), ("total_order", "long"), ("data_collection_order", "long")]
        key = client.get_latest_version(f"{topic}-key").schema if name == "t" else None
        if key is not None:
            assert json.loads(key.schema_str) == avro.key_schema(SET, tables[name])


# A Python with apache-flink: scripts/install.sh puts one in .cache/flink-venv.
_DEFAULT_PYFLINK = Path(__file__).resolve().parents[2] / ".cache" / "flink-venv" / "bin" / "python"
PYFLINK = os.environ.get("PGSHOVEL_TEST_PYFLINK") or (str(_DEFAULT_PYFLINK) if _DEFAULT_PYFLINK.exists() else None)
FLINK_COLUMNS = [["id", "INT"], ["v", "STRING"], ["n", "DECIMAL(10, 2)"], ["ts", "TIMESTAMP_LTZ(6)"]]


def flink_changelog(stack, topic: str, path: Path) -> subprocess.CompletedProcess:
    """Run Flink's debezium-json format over the topic's events (tombstones left out, as
    the format skips them); stdout: one {"kind", "row"} JSON line per changelog row."""
    values = [v for _, v, _ in read_topics(stack.bootstrap, [topic])[topic] if v is not None]
    path.write_bytes(b"".join(v + b"\n" for v in values))
    script = Path(__file__).with_name("pyflink_changelog.py")
    return subprocess.run([PYFLINK, str(script), str(path), json.dumps(FLINK_COLUMNS)],
                          capture_output=True, text=True, timeout=300, cwd=path.parent)


@pytest.mark.skipif(not PYFLINK, reason="PGSHOVEL_TEST_PYFLINK: path of a Python with apache-flink")
def test_flink_debezium_json_reads_the_topic(stack, cluster, db, schema, tmp_path, relay_factory):
    """Flink's own Debezium consumer rebuilds the table from snapshot rows, inserts,
    updates (with their before image), deletes and key updates."""
    prefix = f"flink{cluster}"
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(10,2), ts timestamptz)")
        cur.execute(f"INSERT INTO {table} VALUES (1, 'one', 1.5, '2024-02-29 12:34:56.789012+03'), "
                    "(2, 'two', 2.5, NULL)")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding="json",
                       envelope="debezium", topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    relay = relay_factory(SET)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (3, 'thrée ✓', -0.01, now())")
        cur.execute(f"DELETE FROM {table} WHERE id = 2")
        cur.execute(f"UPDATE {table} SET id = 30 WHERE id = 3")
        cur.execute(f"UPDATE {table} SET v = 'ONE', n = n * 2 WHERE id = 1")
    caught_up(stack, cluster, SET)
    topic = names.table_topic(prefix, schema, "t")
    proc = flink_changelog(stack, topic, tmp_path / "events.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    changelog = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [c["kind"] for c in changelog] == ["+I", "+I", "+I", "-D", "-D", "+I", "-U", "+U"]
    state: dict = {}
    for change in changelog:
        row = tuple(change["row"])
        if change["kind"] in ("+I", "+U"):
            assert change["kind"] == "+U" or row[0] not in state
            state[row[0]] = row
        else:
            assert state.pop(row[0]) == row
    with db.cursor() as cur:
        cur.execute(f"SELECT id::text, v, n::text, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') "
                    f"FROM {table}")
        assert state == {r[0]: r for r in cur.fetchall()}

    assert relay.stop() == 0
