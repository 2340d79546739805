"""The debezium envelope against the real stack, both backends, both encodings: every
operation, a key update, an unkeyed delete and snapshot rows, checked field by field
against Debezium 3.x's PostgreSQL change events (the field set of a real one is in
tests/fixtures, compared in tests/unit/test_debezium_fixture.py), and the registered Avro
value schema. With the logical backend, the WAL positions are checked against a
test_decoding slot reading the same transactions: source.lsn is each change's own LSN,
sequence pairs it with the end of the previous transaction, transaction.id is
"<xid>:<lsn>" and ts_us the commit time, as Debezium writes them. Flink reads these topics
in test_debezium_flink.py."""

import json
import time
from datetime import datetime

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import __version__, names
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import avro, connect_avro
from pgshovel2.ops.verify import read_topics
from pgshovel2.wire import Lsn
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config

ENVELOPE_FIELDS = ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
# Debezium 3.x's io.debezium.connector.postgresql.Source, plus pgshovel's position.
SOURCE_FIELDS = ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
                 "schema", "table", "txId", "lsn", "xmin", "position"]
SET = "dbz"
XID = 0xFFFFFFFF


def check_event(value: dict, op: str, before: dict | None, after: dict | None, table: str, schema: str,
                txid: int | None, window: tuple[int, int], order: tuple[int, int] | None,
                snapshot: str = "false", wal: dict | None = None):
    """One Debezium change event, field by field. order: (total_order, data_collection_order);
    wal (logical backend): the change's lsn, the last_lsn before its transaction, ts_us its commit time."""
    assert list(value) == ENVELOPE_FIELDS
    assert (value["op"], value["before"], value["after"]) == (op, before, after)
    src = value["source"]
    assert list(src) == SOURCE_FIELDS
    assert src["version"] == __version__ and src["connector"] == "pgshovel" and src["name"] == SET
    assert (src["db"], src["schema"], src["table"]) == ("pgshovel", schema, table)
    assert src["snapshot"] == snapshot and src["xmin"] is None
    assert src["txId"] == (None if txid is None else txid & XID)
    assert window[0] <= src["ts_ms"] <= value["ts_ms"] <= window[1]
    assert value["ts_ms"] == value["ts_us"] // 1000 == value["ts_ns"] // 1_000_000
    if wal is None:  # trigger backend: no LSN anywhere, the capture time in ms
        assert (src["lsn"], src["sequence"]) == (None, None)
        assert (src["ts_us"], src["ts_ns"]) == (src["ts_ms"] * 1000, src["ts_ms"] * 1_000_000)
    else:
        last = "null" if wal["last_lsn"] is None else f'"{wal["last_lsn"]}"'
        assert (src["lsn"], src["sequence"]) == (wal["lsn"], f'[{last},"{wal["lsn"]}"]')
        if "ts_us" in wal:
            assert (src["ts_ms"], src["ts_us"], src["ts_ns"]) == (
                wal["ts_us"] // 1000, wal["ts_us"], wal["ts_us"] * 1000)
    if order is None:
        assert value["transaction"] is None
    else:
        tx_id = str(txid) if wal is None else f"{txid & XID}:{wal['lsn']}"
        assert value["transaction"] == {"id": tx_id, "total_order": order[0], "data_collection_order": order[1]}


def wal_transactions(db, slot: str) -> dict[int, dict]:
    """test_decoding's view of the transactions in slot (consumed), by xid: commit time (µs),
    end LSN (where test_decoding reports the COMMIT) and the LSN of each change in order."""
    out: dict[int, dict] = {}
    with db.cursor() as cur:
        cur.execute("SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_get_changes(%s, NULL, NULL, "
                    "'include-timestamp', 'on')", (slot,))
        for lsn, xid, data in cur.fetchall():
            txn = out.setdefault(xid, {"changes": []})
            if data.startswith("table "):
                txn["changes"].append(int(Lsn.parse(lsn)))
            elif data.startswith("COMMIT"):
                at = datetime.fromisoformat(data.split("(at ")[1].rstrip(")").replace("+00", "+00:00"))
                txn["ts_us"], txn["end_lsn"] = int(at.timestamp()) * 1_000_000 + at.microsecond, int(Lsn.parse(lsn))
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return out


@pytest.mark.parametrize("encoding", ["avro", "avro-own", "json"])  # avro-own: debezium: {schemas: false}
def test_debezium_envelope(stack, cluster, db, schema, tmp_path, relay_factory, backend, encoding):
    prefix = f"dbz{encoding.replace('-', '')}{cluster}"
    own = encoding == "avro-own"
    encoding = encoding.removesuffix("-own")
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".u (msg text)')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (1, \'existing\'), (9, \'nine\')')
        cur.execute(f'INSERT INTO "{schema}".u VALUES (\'old\')')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"},
                                         {"schema": schema, "name": "u", "allow_unkeyed": True}],
                       encoding=encoding, backend=backend, envelope="debezium", topic_prefix=prefix,
                       **({"debezium": {"schemas": False}} if own else {}))
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    started = int(time.time() * 1000)
    relay = relay_factory(SET, "--heartbeat-interval", "3600")  # no heartbeat moves sequence's first LSN
    relay.wait_for("snapshot done")
    audit = f"audit_{cluster}"
    if backend == "logical":
        with db.cursor() as cur:
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (audit,))
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
        (1, False, "r"), (9, False, "r"), (2, False, "c"), (3, False, "c"), (2, False, "u"), (3, False, "d"),
        (3, True, "d"), (2, False, "d"), (2, True, "d"), (20, False, "c")]
    first_txid = int(t_msgs[2][2]["pgshovel.txid"])
    wal: dict = {first_txid: None, txid: None, 0: None}
    if backend == "logical":
        with ClusterStore(stack.zk, cluster) as store:
            snapshot_lsn = int(Lsn.parse(store.get_relay_record(SET, "snapshot")["lsn"]))
        seen = wal_transactions(db, audit)
        first, second = seen[first_txid & XID], seen[txid & XID]
        at = lambda txn, i, last: {"lsn": txn["changes"][i], "last_lsn": last, "ts_us": txn["ts_us"]}  # noqa: E731
        wal = {0: {"lsn": snapshot_lsn, "last_lsn": None},  # snapshot rows: the slot's consistent point
               # the first transaction: the stream began at the consistent point, then each follows
               # the end of the one before it
               first_txid: [at(first, i, snapshot_lsn) for i in (0, 1)],
               txid: [at(second, i, first["end_lsn"]) for i in (0, 1, 2, 2, 3, 4)]}
    row = lambda i, v: {"id": i, "v": v}  # noqa: E731
    expected = [
        ("r", None, row(1, "existing"), None, None, "first", wal[0]),
        ("r", None, row(9, "nine"), None, None, "last_in_data_collection", wal[0]),
        ("c", None, row(2, "two"), first_txid, (1, 1), "false", wal[first_txid] and wal[first_txid][0]),
        ("c", None, row(3, "three"), first_txid, (2, 2), "false", wal[first_txid] and wal[first_txid][1]),
        # old image, like REPLICA IDENTITY FULL
        ("u", row(2, "two"), row(2, "TWO"), txid, (1, 1), "false", wal[txid] and wal[txid][0]),
        ("d", row(3, "three"), None, txid, (2, 2), "false", wal[txid] and wal[txid][1]),  # the full old row
        # key update: delete of the old key, then create of the new one, both at the change's LSN
        ("d", row(2, "TWO"), None, txid, (3, 3), "false", wal[txid] and wal[txid][2]),
        ("c", None, row(20, "TWO"), txid, (4, 4), "false", wal[txid] and wal[txid][3]),
    ]
    events = [(k, v, h) for k, v, h in t_msgs if v is not None]
    for (key, value, headers), (op, before, after, tx, order, snap, at_wal) in zip(events, expected, strict=True):
        check_event(value, op, before, after, "t", schema, tx, window, order, snap, at_wal)
        assert key == {"id": (after or before)["id"]}
        assert headers["pgshovel.op"] == op and headers["pgshovel.set"] == SET
        assert headers["pgshovel.txid"] == str(tx or 0)
        assert headers["pgshovel.position"] == value["source"]["position"]
    for i, (key, value, _) in enumerate(t_msgs):  # every tombstone follows its delete event
        if value is None:
            assert t_msgs[i - 1][1]["op"] == "d" and t_msgs[i - 1][0] == key

    u_msgs = messages(stack, u_topic)
    assert [(k, h["pgshovel.op"]) for k, _, h in u_msgs] == [(None, "r"), (None, "c"), (None, "d")]
    check_event(u_msgs[0][1], "r", None, {"msg": "old"}, "u", schema, None, window, None, "last", wal[0])
    check_event(u_msgs[1][1], "c", None, {"msg": "new"}, "u", schema, txid, window, (5, 1), "false",
                wal[txid] and wal[txid][4])
    check_event(u_msgs[2][1], "d", {"msg": "old"}, None, "u", schema, txid, window, (6, 2), "false",
                wal[txid] and wal[txid][5])

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

    if own:
        check_registered_schemas(stack, cluster, t_topic, u_topic)
    elif encoding == "avro":
        check_connect_avro(stack, cluster, t_topic, u_topic)
    else:
        check_connect_json(stack, t_topic, u_topic)


def check_connect_json(stack, t_topic: str, u_topic: str):
    """JSON is Kafka Connect JsonConverter's form with schemas (as Debezium's default): every key and
    value ``{"schema", "payload"}``, named as Debezium names them after the topic."""
    raw = read_topics(stack.bootstrap, [t_topic, u_topic])
    for topic, keyed in ((t_topic, True), (u_topic, False)):
        for key, value, _ in raw[topic]:
            if keyed:
                key = json.loads(key)
                assert list(key) == ["schema", "payload"] and key["schema"]["name"] == f"{topic}.Key"
                assert key["schema"]["fields"] == [{"type": "int32", "optional": False, "field": "id"}]
            else:
                assert key is None
            if value is not None:
                value = json.loads(value)
                assert list(value) == ["schema", "payload"] and value["schema"]["name"] == f"{topic}.Envelope"
                assert [f["field"] for f in value["schema"]["fields"]] == ENVELOPE_FIELDS
                after = value["schema"]["fields"][1]
                assert after["name"] == f"{topic}.Value" and after["optional"] is True


def _registered_values(stack, cluster: str, client, t_topic: str, u_topic: str) -> list[tuple]:
    """(topic, table name, Table, latest registered value schema) of the set's tables t and u."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(SET)
    tables = {t.name: t for t in record.tables}
    return [(topic, name, tables[name], json.loads(client.get_latest_version(f"{topic}-value").schema.schema_str))
            for topic, name in ((t_topic, "t"), (u_topic, "u"))]


def check_connect_avro(stack, cluster: str, t_topic: str, u_topic: str) -> None:
    """Avro with Connect schemas: the subjects hold Debezium's Connect schemas as Confluent's
    AvroConverter registers them (codec.connect_avro, checked in tests/unit/test_connect_avro.py),
    named after the topic as Debezium names them."""
    client = SchemaRegistryClient({"url": stack.registry})
    for topic, name, table, registered in _registered_values(stack, cluster, client, t_topic, u_topic):
        assert registered == connect_avro.value_schema(topic, table)
        assert registered["connect.name"] == f"{topic}.Envelope" and registered["connect.version"] == 2
        assert [f["name"] for f in registered["fields"]] == ENVELOPE_FIELDS
        if name == "t":
            key = json.loads(client.get_latest_version(f"{topic}-key").schema.schema_str)
            assert key == connect_avro.key_schema(topic, table)
            assert key["connect.name"] == f"{topic}.Key"


def check_registered_schemas(stack, cluster: str, t_topic: str, u_topic: str) -> None:
    """debezium: {schemas: false}: the value subjects hold the Envelope record whose before/after is
    the row envelope's record."""
    client = SchemaRegistryClient({"url": stack.registry})
    for topic, name, table, registered in _registered_values(stack, cluster, client, t_topic, u_topic):
        assert registered["name"] == "Envelope"
        assert registered["namespace"] == f"pgshovel.{SET}.{names.avro_name(table.schema)}.{name}"
        fields = {f["name"]: f for f in registered["fields"]}
        assert list(fields) == ENVELOPE_FIELDS
        row_schema = avro.value_schema(SET, table)
        assert fields["before"]["type"] == ["null", row_schema] and fields["before"]["default"] is None
        assert fields["after"]["type"] == ["null", f"{row_schema['namespace']}.{row_schema['name']}"]
        assert fields["after"]["default"] is None
        assert fields["op"]["type"] == "string"
        for ts in ("ts_ms", "ts_us", "ts_ns"):
            assert (fields[ts]["type"], fields[ts]["default"]) == (["null", "long"], None)
        source = fields["source"]["type"]
        assert (source["namespace"], source["name"]) == ("pgshovel", "Source")
        assert [f["name"] for f in source["fields"]] == SOURCE_FIELDS
        nullable = {f["name"]: f["type"] for f in source["fields"] if isinstance(f["type"], list)}
        assert nullable == {"snapshot": ["string", "null"], "sequence": ["null", "string"],
                            **{f: ["null", "long"] for f in ("ts_us", "ts_ns", "txId", "lsn", "xmin")}}
        block = fields["transaction"]["type"]
        assert block[0] == "null" and block[1]["name"] == "TransactionBlock"
        assert [(f["name"], f["type"]) for f in block[1]["fields"]] == [
            ("id", "string"), ("total_order", "long"), ("data_collection_order", "long")]
        key = client.get_latest_version(f"{topic}-key").schema if name == "t" else None
        if key is not None:
            assert json.loads(key.schema_str) == avro.key_schema(SET, table)
