"""The consumer library and `pgshovel tail` against the real stack: sets relayed
by pgshovel-kafka-relay, read back and reassembled into source transactions.
Broken streams are made by writing extra messages with a plain Producer into
the set's real topics, as a faulty or duplicate writer would."""

import json
import signal
import subprocess
import time

import pytest
from confluent_kafka import Producer, TopicPartition

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec.rows import encode_record
from pgshovel2.consumer import IncompleteTransactionError, OrderError, SetReader
from tests.helpers import BIN, RelayProcess, caught_up, cli_env, pgshovel, write_config


@pytest.fixture
def relays(stack, cluster, tmp_path):
    """start(set_name) -> a running relay that finished its snapshot; all are killed afterwards."""
    started = []

    def start(set_name: str) -> RelayProcess:
        relay = RelayProcess(stack, cluster, set_name, log_path=tmp_path / f"{set_name}.log")
        started.append(relay)
        relay.wait_for("snapshot done")
        return relay

    yield start
    for relay in started:
        relay.stop(signal.SIGKILL)


def make_set(stack, cluster, db, schema, tmp_path, name: str, encoding: str, partitions: int = 3) -> str:
    """Tables <schema>.a (id, v text) and <schema>.b (id, n int), one row each, in set name; returns the prefix."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".a (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".b (id int PRIMARY KEY, n int)')
        cur.execute(f"INSERT INTO \"{schema}\".a VALUES (100, 'old'); INSERT INTO \"{schema}\".b VALUES (200, 2)")
    prefix = f"{name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}, {"schema": schema, "name": "b"}],
                       encoding=encoding, topic_prefix=prefix, topics={"partitions": partitions})
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    return prefix


def transaction(db, *statements: str) -> int:
    """Run statements in one transaction; returns its txid (txid_current, as captured)."""
    with db.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT txid_current()")
        txid = cur.fetchone()[0]
        for statement in statements:
            cur.execute(statement)
        cur.execute("COMMIT")
    return txid


def read(stack, cluster, set_name: str, **options) -> list:
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry, **options)
    with reader:
        return list(reader.transactions(until_caught_up=True))


def changes(txn) -> list[tuple]:
    return [(c.op, c.table, c.key, c.value) for c in txn.changes]


def workload(db, s: str) -> list[tuple[int, list[tuple]]]:
    """Four source transactions on <s>.a / <s>.b; returns [(txid, expected changes)]."""
    a, b = f"{s}.a", f"{s}.b"
    t1 = transaction(db, f"INSERT INTO \"{s}\".a VALUES (1, 'one'), (2, 'two'), (3, 'three')",
                     f'INSERT INTO "{s}".b VALUES (10, 100)', f"UPDATE \"{s}\".a SET v = 'TWO' WHERE id = 2")
    t2 = transaction(db, f'UPDATE "{s}".a SET id = 20 WHERE id = 2', f'DELETE FROM "{s}".b WHERE id = 10',
                     f'INSERT INTO "{s}".b VALUES (11, 110)')
    t3 = transaction(db, f'TRUNCATE "{s}".b', f'INSERT INTO "{s}".b VALUES (12, 120)')
    t4 = transaction(db, f'DELETE FROM "{s}".a WHERE id = 1')
    return [
        (t1, [("c", a, {"id": 1}, {"id": 1, "v": "one"}), ("c", a, {"id": 2}, {"id": 2, "v": "two"}),
              ("c", a, {"id": 3}, {"id": 3, "v": "three"}), ("c", b, {"id": 10}, {"id": 10, "n": 100}),
              ("u", a, {"id": 2}, {"id": 2, "v": "TWO"})]),
        (t2, [("d", a, {"id": 2}, None), ("c", a, {"id": 20}, {"id": 20, "v": "TWO"}),
              ("d", b, {"id": 10}, None), ("c", b, {"id": 11}, {"id": 11, "n": 110})]),
        (t3, [("t", b, None, None), ("c", b, {"id": 12}, {"id": 12, "n": 120})]),
        (t4, [("d", a, {"id": 1}, None)]),
    ]


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_transactions_reassembled_exactly(stack, cluster, db, schema, tmp_path, relays, encoding):
    make_set(stack, cluster, db, schema, tmp_path, "re", encoding)
    relays("re")
    expected = workload(db, schema)
    caught_up(stack, cluster, "re")
    txns = read(stack, cluster, "re")
    snapshot = [c for t in txns if t.snapshot for c in changes(t)]
    assert sorted(snapshot, key=str) == [("r", f"{schema}.a", {"id": 100}, {"id": 100, "v": "old"}),
                                         ("r", f"{schema}.b", {"id": 200}, {"id": 200, "n": 2})]
    assert all(t.txid == 0 for t in txns if t.snapshot)
    stream = [t for t in txns if not t.snapshot]
    assert [(t.txid, changes(t)) for t in stream] == expected
    for t in stream:
        assert {c.txid for c in t.changes} == {t.txid}
        assert [c.position for c in t.changes] == sorted(c.position for c in t.changes)
        assert t.position == t.changes[0].position
    # the data really was spread over several partitions
    assert len({(c.topic, c.partition) for t in stream for c in t.changes}) > 2


def test_snapshot_rows_in_bounded_chunks(stack, cluster, db, schema, tmp_path, relays):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".big (id int PRIMARY KEY, s text)')
        cur.execute(f"INSERT INTO \"{schema}\".big SELECT g, 'row ' || g FROM generate_series(1, 250) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "big"}], topic_prefix=f"snap{cluster}",
                       topics={"partitions": 2})
    pgshovel(stack, cluster, "set", "create", "snap", str(cfg))
    relays("snap")
    txid = transaction(db, f"UPDATE \"{schema}\".big SET s = 'changed' WHERE id = 7")
    caught_up(stack, cluster, "snap")
    txns = read(stack, cluster, "snap", snapshot_chunk=100)
    chunks = [t for t in txns if t.snapshot]
    assert len(chunks) >= 3 and all(0 < len(t.changes) <= 100 for t in chunks)
    rows = [c for t in chunks for c in t.changes]
    assert sorted(c.key["id"] for c in rows) == list(range(1, 251))
    assert {(c.op, c.txid) for c in rows} == {("r", 0)}
    assert all(c.value == {"id": c.key["id"], "s": f"row {c.key['id']}"} for c in rows)
    assert [(t.txid, changes(t)) for t in txns if not t.snapshot] == [
        (txid, [("u", f"{schema}.big", {"id": 7}, {"id": 7, "s": "changed"})])]


def test_table_filter(stack, cluster, db, schema, tmp_path, relays):
    make_set(stack, cluster, db, schema, tmp_path, "flt", "avro")
    relays("flt")
    expected = workload(db, schema)
    caught_up(stack, cluster, "flt")
    txns = read(stack, cluster, "flt", tables=[f"{schema}.b"])
    only_b = [(txid, [c for c in chs if c[1] == f"{schema}.b"]) for txid, chs in expected]
    assert [(t.txid, changes(t)) for t in txns if not t.snapshot] == [(x, chs) for x, chs in only_b if chs]
    assert [changes(t) for t in txns if t.snapshot] == [[("r", f"{schema}.b", {"id": 200}, {"id": 200, "n": 2})]]


def test_tail_json_and_pretty(stack, cluster, db, schema, tmp_path, relays):
    make_set(stack, cluster, db, schema, tmp_path, "tl", "avro")
    relays("tl")
    expected = workload(db, schema)
    caught_up(stack, cluster, "tl")
    started = time.monotonic()
    out = pgshovel(stack, cluster, "tail", "tl", "--from-beginning", "--format", "json").stdout
    assert time.monotonic() - started < 60  # exits once caught up
    lines = [json.loads(line) for line in out.splitlines()]
    snapshot = [(x["op"], x["table"], x["key"], x["value"]) for x in lines if x["txid"] == 0]
    assert sorted(snapshot, key=str) == [("r", f"{schema}.a", {"id": 100}, {"id": 100, "v": "old"}),
                                         ("r", f"{schema}.b", {"id": 200}, {"id": 200, "n": 2})]
    stream = [(x["txid"], (x["op"], x["table"], x["key"], x["value"])) for x in lines if x["txid"] != 0]
    assert stream == [(txid, ch) for txid, chs in expected for ch in chs]
    assert all(set(x) == {"txid", "position", "ts_ms", "table", "op", "key", "value"} for x in lines)

    only_a = pgshovel(stack, cluster, "tail", "tl", "--from-beginning", "--table", "a").stdout.splitlines()
    t1 = expected[0][0]
    block = only_a[only_a.index(next(x for x in only_a if x.startswith(f"BEGIN txid {t1} "))):]
    assert block[0].startswith(f"BEGIN txid {t1} (4 changes, ") and block[0].endswith("Z)")
    assert block[1:6] == [f"  c {schema}.a {{id: 1}} -> {{id: 1, v: 'one'}}",
                          f"  c {schema}.a {{id: 2}} -> {{id: 2, v: 'two'}}",
                          f"  c {schema}.a {{id: 3}} -> {{id: 3, v: 'three'}}",
                          f"  u {schema}.a {{id: 2}} -> {{id: 2, v: 'TWO'}}", "COMMIT"]
    assert "\x1b[" not in "\n".join(only_a)  # no colour codes when stdout is not a terminal
    assert not any(f"{schema}.b" in x for x in only_a)


def wait_for_file(path, predicate, proc: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not predicate(text := path.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting on {path} (exit {proc.poll()}):\n{text[-2000:]}")
        time.sleep(0.1)
    return text


def test_tail_follow_while_transactions_commit(stack, cluster, db, schema, tmp_path, relays):
    make_set(stack, cluster, db, schema, tmp_path, "fol", "avro")
    relays("fol")
    out, err = tmp_path / "tail.out", tmp_path / "tail.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        tail = subprocess.Popen([str(BIN / "pgshovel"), "tail", "fol", "--follow", "--format", "json"],
                                env=cli_env(stack, cluster), stdout=stdout, stderr=stderr)
    try:
        wait_for_file(err, lambda text: "reading set 'fol'" in text, tail)
        expected = []
        for i in range(1, 101):  # each committed while the relay and the tail run
            txid = transaction(db, f"UPDATE \"{schema}\".a SET v = 'v{i}' WHERE id = 100",
                               f'INSERT INTO "{schema}".b VALUES ({i}, {i})')
            expected += [(txid, "u", f"{schema}.a", {"id": 100}, {"id": 100, "v": f"v{i}"}),
                         (txid, "c", f"{schema}.b", {"id": i}, {"id": i, "n": i})]
        caught_up(stack, cluster, "fol")
        wait_for_file(out, lambda text: text.count("\n") >= len(expected), tail)
        time.sleep(1)
        assert tail.poll() is None  # --follow keeps running once caught up
    finally:
        tail.terminate()
        tail.wait(30)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["txid"], x["op"], x["table"], x["key"], x["value"]) for x in lines] == expected


def test_start_at_end_sees_only_later_transactions(stack, cluster, db, schema, tmp_path, relays):
    make_set(stack, cluster, db, schema, tmp_path, "late", "avro")
    relays("late")
    workload(db, schema)
    caught_up(stack, cluster, "late")
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, "late", stack.bootstrap, stack.registry, from_beginning=False)
    with reader:
        later = [transaction(db, f"INSERT INTO \"{schema}\".a VALUES ({i}, 'later')") for i in (50, 51)]
        caught_up(stack, cluster, "late")
        txns = list(reader.transactions(until_caught_up=True))
    assert [(t.txid, changes(t)) for t in txns] == [
        (txid, [("c", f"{schema}.a", {"id": i}, {"id": i, "v": "later"})])
        for txid, i in zip(later, (50, 51), strict=True)]


def producer(stack) -> Producer:
    return Producer({"bootstrap.servers": stack.bootstrap})


def data_message(p: Producer, topic: str, key: int, txid: int, position: str, set_name: str,
                 offsets: list | None = None) -> None:
    """Produce a fake data message to partition 0; its offset is appended to offsets once delivered."""
    headers = [("pgshovel.op", "c"), ("pgshovel.txid", str(txid)), ("pgshovel.position", position),
               ("pgshovel.ts_ms", "1"), ("pgshovel.set", set_name)]
    on_delivery = (lambda err, msg: offsets.append(msg.offset())) if offsets is not None else None
    p.produce(topic, json.dumps({"id": key, "v": "x"}), json.dumps({"id": key}), partition=0, headers=headers,
              on_delivery=on_delivery)


def txn_record(p: Producer, topic: str, kind: str, txid: int, position: str, counts: dict | None = None) -> None:
    datum = {"type": kind, "txid": txid, "position": position, "ts_ms": 1,
             "event_count": sum(counts.values()) if counts is not None else None,
             "data_collections": [{"data_collection": t, "event_count": n} for t, n in counts.items()]
             if counts is not None else None, "table": None}
    p.produce(topic, encode_record(datum, None), partition=0)


def test_start_at_end_drops_orphans_of_a_transaction_in_flight(stack, cluster, db, schema, tmp_path, relays):
    prefix = make_set(stack, cluster, db, schema, tmp_path, "orph", "json", partitions=1)
    relays("orph")
    transaction(db, f"INSERT INTO \"{schema}\".a VALUES (1, 'one')")
    caught_up(stack, cluster, "orph")
    last = read(stack, cluster, "orph")[-1].changes[-1].position
    a_topic, txn_topic = names.table_topic(prefix, schema, "a"), names.transactions_topic(prefix)
    p = producer(stack)
    txn_record(p, txn_topic, "BEGIN", 1, last)       # a transaction in flight when the reader starts
    data_message(p, a_topic, 900, 1, last, "orph")
    p.flush(30)
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, "orph", stack.bootstrap, from_beginning=False)
    with reader:
        data_message(p, a_topic, 901, 1, last, "orph")  # ... whose rest arrives after the start
        txn_record(p, txn_topic, "END", 1, last, {a_topic: 2})
        p.flush(30)
        txid = transaction(db, f"INSERT INTO \"{schema}\".a VALUES (2, 'two')")
        caught_up(stack, cluster, "orph")
        txns = list(reader.transactions(until_caught_up=True))
        assert reader.reassembler.orphans_dropped == 1
    assert [(t.txid, changes(t)) for t in txns] == [(txid, [("c", f"{schema}.a", {"id": 2}, {"id": 2, "v": "two"})])]


def test_messages_the_client_gives_again_are_taken_once(stack, cluster, db, schema, tmp_path, relays):
    """A seek back after the first transaction makes the client deliver read messages again (as
    librdkafka has after pause/resume): they are counted and ignored, not an OrderError."""
    prefix = make_set(stack, cluster, db, schema, tmp_path, "again", "json", partitions=1)
    relays("again")
    expected = workload(db, schema)
    caught_up(stack, cluster, "again")
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, "again", stack.bootstrap, stack.registry)
    got = []
    with reader:
        for txn in reader.transactions(until_caught_up=True):
            if not txn.snapshot:
                got.append((txn.txid, changes(txn)))
            if len(got) == 1 and reader.redelivered == 0:
                for topic in (names.table_topic(prefix, schema, "a"), names.transactions_topic(prefix)):
                    reader._consumer.seek(TopicPartition(topic, 0, 0))
    assert got == expected
    assert reader.redelivered > 0


def test_extra_message_is_an_order_error(stack, cluster, db, schema, tmp_path, relays):
    prefix = make_set(stack, cluster, db, schema, tmp_path, "bad", "json", partitions=1)
    relays("bad")
    txid = transaction(db, f"INSERT INTO \"{schema}\".a VALUES (1, 'one')")
    caught_up(stack, cluster, "bad")
    position = read(stack, cluster, "bad")[-1].changes[-1].position
    a_topic = names.table_topic(prefix, schema, "a")
    p = producer(stack)
    offsets: list[int] = []
    data_message(p, a_topic, 1, txid, position, "bad", offsets)  # a duplicate of the transaction's insert
    p.flush(30)
    with pytest.raises(OrderError) as err:
        read(stack, cluster, "bad")
    assert f"data message beyond the END count 1 of txid {txid}" in str(err.value)
    assert (err.value.topic, err.value.partition, err.value.offset, err.value.txid, err.value.position) == (
        a_topic, 0, offsets[0], txid, position)  # the duplicate, not the relay's insert
    proc = pgshovel(stack, cluster, "tail", "bad", "--from-beginning", check=False)
    assert proc.returncode == 1
    assert f"error: data message beyond the END count 1 of txid {txid}" in proc.stderr
    assert f"topic {a_topic!r}, partition 0, offset {offsets[0]}, txid {txid}, position {position}" in proc.stderr


def test_missing_data_times_out_naming_txid_topic_and_count(stack, cluster, db, schema, tmp_path, relays):
    prefix = make_set(stack, cluster, db, schema, tmp_path, "miss", "json", partitions=1)
    relays("miss")
    transaction(db, f"INSERT INTO \"{schema}\".a VALUES (1, 'one')")
    caught_up(stack, cluster, "miss")
    position = read(stack, cluster, "miss")[-1].changes[-1].position
    next_position = position[:-10] + f"{int(position[-10:]) + 1:010d}"
    b_topic, txn_topic = names.table_topic(prefix, schema, "b"), names.transactions_topic(prefix)
    p = producer(stack)
    txn_record(p, txn_topic, "BEGIN", 77, next_position)
    txn_record(p, txn_topic, "END", 77, next_position, {b_topic: 3})  # data never written
    p.flush(30)
    started = time.monotonic()
    with pytest.raises(IncompleteTransactionError) as err:
        read(stack, cluster, "miss", assembly_timeout=2)
    assert 2 <= time.monotonic() - started < 30
    assert (err.value.txid, err.value.missing) == (77, {b_topic: 3})
    assert "txid 77" in str(err.value) and f"3 message(s) in topic {b_topic!r}" in str(err.value)
