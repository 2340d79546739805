"""Envelope construction without I/O: the row and debezium envelopes' message
sequences, the Debezium event structure in both encodings, its Avro schema,
transaction numbering, and the emitter's framing and counts."""

import io
import json

import fastavro
import pytest

from pgshovel2 import __version__
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.errors import EncodeError
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, SnapshotMarks, TxnOrder
from pgshovel2.relay.emit.routes import TableRoute, database_name
from pgshovel2.relay.source import Change

# Trigger forms: ints as numbers, numeric as text, timestamptz as µs since 2000-01-01 UTC.
TABLE = Table("S p", "T.1", (
    Column("id", 1, "integer", "int4", False, False),
    Column("amount", 2, "numeric(10,2)", "numeric", False, True, 10, 2),
    Column("at", 3, "timestamp with time zone", "timestamptz", False, True),
    Column("u", 4, "uuid", "uuid", False, True),
), ("id",), "primary key")
UNKEYED = Table("public", "log", (Column("msg", 1, "text", "text", False, True),), (), "none")
ROW1 = [1, "12.50", 0, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
ROW1B = [1, "99.99", None, None]
ROW2 = [2, "12.50", 0, None]
NOW_NS = 1_700_000_000_123_456_789


def clock() -> int:
    return NOW_NS


def envelope(table: Table = TABLE, use_avro: bool = False) -> DebeziumEnvelope:
    key_w = env_w = None
    if use_avro:
        env_w = AvroWriter(avro.debezium_value_schema("myset", table), 7)
        key_schema = avro.key_schema("myset", table)
        key_w = AvroWriter(key_schema, 8) if key_schema else None
    enc = RowEncoder(table, use_avro, key_w, None)
    return DebeziumEnvelope(enc, SourceInfo("myset", "mydb", table.schema, table.name), "topic.x", env_w, clock)


def ctx(order: TxnOrder | None = None) -> Context:
    return Context(4242, "00000000000000000009:0000000003", 1_699_999_999_000, "false", order or TxnOrder())


def decode_json(messages):
    return [(m.key and json.loads(m.key), m.value and json.loads(m.value), m.op) for m in messages]


# The trigger backend's source block (no LSN): Debezium's fields in its order, plus position.
SOURCE = {"version": __version__, "connector": "pgshovel", "name": "myset", "ts_ms": 1_699_999_999_000,
          "snapshot": "false", "db": "mydb", "sequence": None, "ts_us": 1_699_999_999_000_000,
          "ts_ns": 1_699_999_999_000_000_000, "schema": "S p", "table": "T.1", "txId": 4242, "lsn": None,
          "xmin": None, "position": "00000000000000000009:0000000003"}
AFTER1 = {"id": 1, "amount": "12.50", "at": "2000-01-01T00:00:00.000000Z",
          "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}


def event(before, after, op, total=1, in_collection=1, **source):
    return {"before": before, "after": after, "source": {**SOURCE, **source},
            "transaction": {"id": "4242", "total_order": total, "data_collection_order": in_collection},
            "op": op, "ts_ms": 1_700_000_000_123, "ts_us": 1_700_000_000_123_456, "ts_ns": NOW_NS}


def test_debezium_insert_json():
    got = decode_json(envelope().change("I", ROW1, None, ctx()))
    assert got == [({"id": 1}, event(None, AFTER1, "c"), "c")]


def test_debezium_update_without_old_image_has_null_before():
    got = decode_json(envelope().change("U", ROW1B, None, ctx()))
    after = {"id": 1, "amount": "99.99", "at": None, "u": None}
    assert got == [({"id": 1}, event(None, after, "u"), "u")]


def test_debezium_update_with_old_image_of_same_key_keeps_before():
    got = decode_json(envelope().change("U", ROW1B, ROW1, ctx()))
    assert got[0][1]["before"] == AFTER1 and got[0][1]["op"] == "u" and len(got) == 1


def test_debezium_key_update_is_delete_tombstone_create():
    order = TxnOrder()
    got = decode_json(envelope().change("U", ROW2, ROW1, ctx(order)))
    after2 = {"id": 2, "amount": "12.50", "at": "2000-01-01T00:00:00.000000Z", "u": None}
    assert got == [({"id": 1}, event(AFTER1, None, "d", 1, 1), "d"),
                   ({"id": 1}, None, "d"),
                   ({"id": 2}, event(None, after2, "c", 2, 2), "c")]
    assert order.total == 2


def test_debezium_delete_then_tombstone():
    got = decode_json(envelope().change("D", ROW1, None, ctx()))
    assert got == [({"id": 1}, event(AFTER1, None, "d"), "d"), ({"id": 1}, None, "d")]


def test_debezium_unkeyed_delete_is_emitted_without_tombstone():
    got = decode_json(envelope(UNKEYED).change("D", ["bye"], None, ctx()))
    assert len(got) == 1
    key, value, op = got[0]
    assert key is None and op == "d"
    assert value["before"] == {"msg": "bye"} and value["after"] is None
    assert (value["source"]["schema"], value["source"]["table"]) == ("public", "log")


@pytest.mark.parametrize("snapshot", ["first", "true", "first_in_data_collection", "last_in_data_collection",
                                      "last"])
def test_debezium_snapshot_read(snapshot):
    got = decode_json(envelope().read(ROW1, Context(0, "00000000000000000000:0000000000", 5, snapshot)))
    assert got == [({"id": 1}, {"before": None, "after": AFTER1,
                                "source": {**SOURCE, "ts_ms": 5, "ts_us": 5000, "ts_ns": 5_000_000,
                                           "snapshot": snapshot, "txId": None,
                                           "position": "00000000000000000000:0000000000"},
                                "transaction": None, "op": "r", "ts_ms": 1_700_000_000_123,
                                "ts_us": 1_700_000_000_123_456, "ts_ns": NOW_NS}, "r")]


def test_debezium_logical_fields():
    """With an LSN (logical backend): source.lsn is the change's, sequence Debezium's JSON pair, txId the
    32-bit xid, transaction.id "<xid>:<lsn>", ts_us/ts_ns the commit time's µs (as Debezium 3.x)."""
    txid = (2 << 32) | 734  # epoch 2
    c = Context(txid, "p", 1_795_382_770_834, "false", TxnOrder(), lsn=26529952, last_lsn=26529656,
                ts_us=1_795_382_770_834_693)
    for use_avro in (False, True):
        msgs = envelope(use_avro=use_avro).change("I", ROW1, None, c._replace(order=TxnOrder()))
        value = (json.loads(msgs[0].value) if not use_avro else fastavro.schemaless_reader(
            io.BytesIO(msgs[0].value[5:]), fastavro.parse_schema(avro.debezium_value_schema("myset", TABLE))))
        src = value["source"]
        assert (src["lsn"], src["sequence"], src["txId"], src["xmin"]) == (26529952, '["26529656","26529952"]',
                                                                           734, None)
        assert (src["ts_ms"], src["ts_us"], src["ts_ns"]) == (1_795_382_770_834, 1_795_382_770_834_693,
                                                              1_795_382_770_834_693_000)
        assert value["transaction"] == {"id": "734:26529952", "total_order": 1, "data_collection_order": 1}
    first = decode_json(envelope().change("I", ROW1, None, c._replace(last_lsn=None)))[0][1]
    assert first["source"]["sequence"] == '[null,"26529952"]'


def test_debezium_trigger_fields_have_no_lsn():
    """The trigger backend: no LSN anywhere; txId is the xid, transaction.id the 64-bit txid."""
    txid = (2 << 32) | 734
    value = decode_json(envelope().change("I", ROW1, None, Context(txid, "p", 5, "false", TxnOrder())))[0][1]
    assert (value["source"]["lsn"], value["source"]["sequence"], value["source"]["txId"]) == (None, None, 734)
    assert value["transaction"]["id"] == str(txid)


def test_debezium_snapshot_row_at_an_lsn():
    got = decode_json(envelope().read(ROW1, Context(0, "p", 5, "last", lsn=26529328)))[0][1]
    assert (got["source"]["lsn"], got["source"]["sequence"], got["source"]["txId"]) == (
        26529328, '[null,"26529328"]', None)


@pytest.mark.parametrize("tables, markers", [
    ("aaabb", ["first", "true", "last_in_data_collection", "first_in_data_collection", "last"]),
    ("a", ["last"]),
    ("ab", ["first", "last"]),
    ("aab", ["first", "last_in_data_collection", "last"]),
    ("abbc", ["first", "first_in_data_collection", "last_in_data_collection", "last"]),
    ("", []),
])
def test_snapshot_marks(tables, markers):
    got = []
    marks = SnapshotMarks(lambda item, marker: got.append((item, marker)))
    for i, table in enumerate(tables):
        marks.add(table, i)
    marks.finish()
    assert got == list(enumerate(markers))


def test_transaction_order_per_collection():
    order = TxnOrder()
    assert [order.next(t) for t in ("a", "b", "a", "a", "b")] == [(1, 1), (2, 1), (3, 2), (4, 3), (5, 2)]


def test_debezium_avro_schema_structure():
    schema = avro.debezium_value_schema("myset", TABLE)
    value = avro.value_schema("myset", TABLE)
    assert (schema["name"], schema["namespace"]) == ("Envelope", "pgshovel.myset.S_x20p.T_x2e1")
    fields = {f["name"]: f for f in schema["fields"]}
    assert list(fields) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert fields["before"]["type"] == ["null", value] and fields["before"]["default"] is None
    assert fields["after"]["type"] == ["null", "pgshovel.myset.S_x20p.T_x2e1"]
    assert fields["after"]["default"] is None
    assert fields["op"]["type"] == "string"
    assert fields["ts_ms"]["type"] == fields["ts_us"]["type"] == fields["ts_ns"]["type"] == ["null", "long"]
    source = fields["source"]["type"]
    assert (source["namespace"], source["name"]) == ("pgshovel", "Source")
    assert [f["name"] for f in source["fields"]] == list(SOURCE)
    optional = {f["name"] for f in source["fields"] if isinstance(f["type"], list)}
    assert optional == {"snapshot", "sequence", "ts_us", "ts_ns", "txId", "lsn", "xmin"}
    block = fields["transaction"]["type"]
    assert block[0] == "null" and (block[1]["namespace"], block[1]["name"]) == ("pgshovel", "TransactionBlock")
    assert [(f["name"], f["type"]) for f in block[1]["fields"]] == [
        ("id", "string"), ("total_order", "long"), ("data_collection_order", "long")]
    assert avro.envelope_row_schema(schema) == value
    fastavro.parse_schema(schema)


def test_debezium_avro_encodes_the_same_event():
    env = envelope(use_avro=True)
    msgs = env.change("U", ROW2, ROW1, ctx())
    assert [m.value is None for m in msgs] == [False, True, False]
    assert msgs[0].value[:5] == b"\x00\x00\x00\x00\x07" and msgs[0].key[:5] == b"\x00\x00\x00\x00\x08"
    parsed = fastavro.parse_schema(avro.debezium_value_schema("myset", TABLE))
    deleted = fastavro.schemaless_reader(io.BytesIO(msgs[0].value[5:]), parsed)
    assert deleted["op"] == "d" and deleted["after"] is None
    assert deleted["before"]["id"] == 1 and str(deleted["before"]["amount"]) == "12.50"
    assert deleted["source"] == SOURCE
    assert deleted["transaction"] == {"id": "4242", "total_order": 1, "data_collection_order": 1}
    created = fastavro.schemaless_reader(io.BytesIO(msgs[2].value[5:]), parsed)
    assert created["op"] == "c" and created["before"] is None and created["after"]["id"] == 2


@pytest.mark.parametrize("use_avro", [True, False])
def test_images_match_row_image(use_avro):
    env = envelope(use_avro=use_avro)
    conv1, conv2 = env.encoder.convert(ROW1), env.encoder.convert(ROW2)
    msgs = env.change("U", ROW2, ROW1, ctx())
    assert env.images(msgs[0].value) == (env.row_image(conv1), None)
    assert env.images(msgs[1].value) == (None, None)
    assert env.images(msgs[2].value) == (None, env.row_image(conv2))


def test_row_envelope_sequences():
    enc = RowEncoder(TABLE, False)
    env = RowEnvelope(enc)
    c = ctx()
    ops = lambda msgs: [(m.key and json.loads(m.key)["id"], m.value is not None, m.op) for m in msgs]  # noqa: E731
    assert ops(env.change("I", ROW1, None, c)) == [(1, True, "c")]
    assert ops(env.change("U", ROW1B, None, c)) == [(1, True, "u")]
    assert ops(env.change("U", ROW2, ROW1, c)) == [(1, False, "d"), (2, True, "c")]
    assert ops(env.change("D", ROW1, None, c)) == [(1, False, "d")]
    assert ops(env.read(ROW1, c)) == [(1, True, "r")]


def unkeyed_row_envelope(use_avro: bool, native: bool) -> RowEnvelope:
    writer = AvroWriter(avro.value_schema("myset", UNKEYED), 9) if use_avro else None
    enc = RowEncoder(UNKEYED, use_avro, None, writer)
    if not native:
        enc.native = None
    return RowEnvelope(enc)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_row_envelope_of_an_unkeyed_table_carries_every_row_image(use_avro, native):
    """Unkeyed (issue #66): a DELETE carries the deleted row (op d, not a tombstone), an UPDATE is the
    old row's d then the new row's u; null keys; the native codec and Python write the same bytes."""
    env, c = unkeyed_row_envelope(use_avro, native), ctx()
    image = lambda text: env.row_image(env.encoder.convert([text]))  # noqa: E731
    assert env.change("I", ["a"], None, c) == [(None, image("a"), "c")]
    assert env.change("D", ["a"], None, c) == [(None, image("a"), "d")]
    assert env.change("U", ["b"], ["a"], c) == [(None, image("a"), "d"), (None, image("b"), "u")]
    assert env.change("U", ["a"], ["a"], c) == [(None, image("a"), "d"), (None, image("a"), "u")]
    assert env.read(["a"], c) == [(None, image("a"), "r")]
    assert env.change("D", ["a"], None, c) == unkeyed_row_envelope(use_avro, not native).change("D", ["a"], None, c)
    assert env.change("U", '["b"]', '["a"]', c) == unkeyed_row_envelope(use_avro, not native).change(
        "U", '["b"]', '["a"]', c)



class RecordingSink:
    """Collects produced messages (the emitter's only use of the sink)."""

    def __init__(self):
        self.produced = []

    def produce(self, topic, key, value, headers):
        self.produced.append((topic, key, value, dict(headers)))


@pytest.mark.parametrize("debezium", [False, True], ids=["row", "debezium"])
def test_emitter_refuses_an_unkeyed_change_without_its_old_row(debezium):
    """An unkeyed table's DELETE without its row (logical, identity not FULL) or UPDATE without its old
    row (a trigger from before old rows were captured) stops the relay (EncodeError, which the loop
    names with the position and set skip), never dropped nor sent as an extra row; nothing produced."""
    sink = RecordingSink()
    env = envelope(UNKEYED) if debezium else RowEnvelope(RowEncoder(UNKEYED, False))
    em = Emitter("myset", {UNKEYED.qualified: TableRoute(UNKEYED, "topic.u", env.encoder, env)}, "txns", None, sink)
    em.begin(4242, "p1", 10)
    begun = list(sink.produced)
    with pytest.raises(EncodeError, match=r'table "public"\."log" has no key .*DELETE came without its row.*'
                                          r'ALTER TABLE "public"\."log" REPLICA IDENTITY FULL'):
        em.change(Change(4242, 10, "D", None, UNKEYED.qualified, None, 1, 0, lsn=77), "p1")
    with pytest.raises(EncodeError, match=r"UPDATE came without its old row.*'pgshovel set upgrade myset CONFIG'"):
        em.change(Change(4242, 10, "U", ["new"], UNKEYED.qualified, None, 1, 1), "p2")
    assert sink.produced == begun
    em.change(Change(4242, 10, "U", ["new"], UNKEYED.qualified, ["old"], 1, 2), "p3")
    em.change(Change(4242, 10, "D", ["new"], UNKEYED.qualified, None, 1, 3), "p4")
    em.end(4242, "p4", 10)
    data = [(json.loads(v), h["pgshovel.op"], h["pgshovel.position"]) for t, k, v, h in sink.produced if t == "topic.u"]
    if debezium:
        assert [(v["before"], v["after"], op, p) for v, op, p in data] == [
            ({"msg": "old"}, {"msg": "new"}, "u", "p3"), ({"msg": "new"}, None, "d", "p4")]
    else:
        assert data == [({"msg": "old"}, "d", "p3"), ({"msg": "new"}, "u", "p3"), ({"msg": "new"}, "d", "p4")]
    end = json.loads(sink.produced[-1][2])
    assert end["type"] == "END" and end["data_collections"] == [{"data_collection": "topic.u",
                                                                 "event_count": len(data)}]


def test_emitter_frames_orders_and_counts_debezium():
    sink = RecordingSink()
    t_env, u_env = envelope(), envelope(UNKEYED)
    u_env.collection = "topic.u"
    routes = {TABLE.qualified: TableRoute(TABLE, "topic.x", t_env.encoder, t_env),
              UNKEYED.qualified: TableRoute(UNKEYED, "topic.u", u_env.encoder, u_env)}
    em = Emitter("myset", routes, "txns", None, sink)
    em.snapshot_row(TABLE, ROW1, "p0", 5, "last")
    em.begin(4242, "p1", 10)
    em.change(Change(4242, 10, "U", ROW2, TABLE.qualified, ROW1, 1, 0), "p1")
    em.change(Change(4242, 10, "D", ["bye"], UNKEYED.qualified, None, 1, 0), "p2")
    em.change(Change(4242, 10, "T", None, UNKEYED.qualified, None, 1, 0), "p3")
    em.change(Change(4242, 10, "D", ROW2, TABLE.qualified, None, 1, 0), "p4")
    em.end(4242, "p4", 10)
    snap = json.loads(sink.produced[0][2])
    assert snap["source"]["snapshot"] == "last" and sink.produced[0][3]["pgshovel.op"] == "r"
    data = [(t, v and json.loads(v), h["pgshovel.op"]) for t, _, v, h in sink.produced[2:] if t != "txns"]
    assert [(t, op, v and (v["transaction"]["total_order"], v["transaction"]["data_collection_order"]))
            for t, v, op in data] == [
        ("topic.x", "d", (1, 1)), ("topic.x", "d", None), ("topic.x", "c", (2, 2)),
        ("topic.u", "d", (3, 1)), ("topic.x", "d", (4, 3)), ("topic.x", "d", None)]
    txn = [json.loads(v) for t, _, v, _ in sink.produced if t == "txns"]
    assert [r["type"] for r in txn] == ["BEGIN", "TRUNCATE", "END"]
    assert txn[1]["table"] == "topic.u"
    assert txn[2]["event_count"] == 6
    assert txn[2]["data_collections"] == [{"data_collection": "topic.u", "event_count": 1},
                                          {"data_collection": "topic.x", "event_count": 5}]
    assert all(h["pgshovel.txid"] == "4242" for t, _, _, h in sink.produced[2:] if t != "txns")


def test_emitter_restarts_order_per_transaction():
    sink = RecordingSink()
    env = envelope()
    em = Emitter("myset", {TABLE.qualified: TableRoute(TABLE, "topic.x", env.encoder, env)}, "txns", None, sink)
    for txid in (1, 2):
        em.begin(txid, "p", 10)
        em.change(Change(txid, 10, "I", ROW1, TABLE.qualified, None, 1, 0), "p")
        em.end(txid, "p", 10)
    blocks = [json.loads(v)["transaction"] for t, _, v, _ in sink.produced if t == "topic.x"]
    assert blocks == [{"id": "1", "total_order": 1, "data_collection_order": 1},
                      {"id": "2", "total_order": 1, "data_collection_order": 1}]


def test_table_route_defaults_to_row_envelope():
    enc = RowEncoder(TABLE, False)
    assert isinstance(TableRoute(TABLE, "t", enc).envelope, RowEnvelope)


@pytest.mark.parametrize("dsn, name", [("host=h dbname=shop user=u", "shop"),
                                       ("postgresql://u@h:5432/shop?sslmode=disable", "shop")])
def test_database_name_from_dsn(dsn, name):
    assert database_name(dsn) == name


def test_emitter_headers_of_row_messages_follow_each_transaction_and_version():
    # the headers shared by a transaction's messages are built once per (txid, ts_ms, version)
    sink = RecordingSink()
    enc = RowEncoder(TABLE, False)
    em = Emitter("myset", {TABLE.qualified: TableRoute(TABLE, "topic.x", enc)}, "txns", None, sink)
    em.begin(7, "p1", 10)
    em.change(Change(7, 10, "I", ROW1, TABLE.qualified, None, 1, 0), "p1")
    em.change(Change(7, 10, "U", ROW2, TABLE.qualified, ROW1, 1, 1), "p2")  # key change: d, then c
    em.end(7, "p2", 10)
    em.begin(8, "p3", 11)
    em.change(Change(8, 11, "D", ROW2, TABLE.qualified, None, 2, 0), "p3")
    em.switch_table(TableRoute(TABLE, "topic.x", enc), 3)
    em.change(Change(8, 11, "I", ROW1, TABLE.qualified, None, 2, 1), "p4")
    data = [(list(h), h) for t, _, _, h in sink.produced if t == "topic.x"]
    assert all(keys == ["pgshovel.op", "pgshovel.txid", "pgshovel.position", "pgshovel.ts_ms", "pgshovel.set",
                        "pgshovel.version"] for keys, _ in data)
    assert [(h["pgshovel.op"], h["pgshovel.txid"], h["pgshovel.position"], h["pgshovel.ts_ms"], h["pgshovel.set"],
             h["pgshovel.version"]) for _, h in data] == [
        ("c", "7", "p1", "10", "myset", "0"), ("d", "7", "p2", "10", "myset", "0"),
        ("c", "7", "p2", "10", "myset", "0"), ("d", "8", "p3", "11", "myset", "0"),
        ("c", "8", "p4", "11", "myset", "3")]
    end = [json.loads(v) for t, _, v, _ in sink.produced if t == "txns"][1]
    assert end["event_count"] == 3 and end["data_collections"] == [{"data_collection": "topic.x", "event_count": 3}]


def test_row_envelope_reads_no_context():
    env = RowEnvelope(RowEncoder(TABLE, False))
    assert env.uses_context is False
    assert env.change("I", ROW1, None, None) == env.change("I", ROW1, None, Context(1, "p", 1, order=TxnOrder()))
