"""decoder pgoutput with large in-progress transactions streamed (protocol 2+, streaming 'on'),
on every server (pg15 and the stock servers of PGSHOVEL2_TEST_STOCK, as app there).

The relay's walsender runs with logical_decoding_work_mem = 64kB (PGSHOVEL_LOGICAL_DECODING_WORK_MEM),
so every transaction of more than a few hundred rows is streamed before its commit; each test
proves it did (pg_stat_replication_slots.stream_txns and the relay's replay log line). A streamed
transaction must come out exactly as a non-streamed one: once, whole, in commit order, without
what its rolled-back savepoints or its own abort did, across a relay SIGKILLed while producing it.
"""

import signal
import time
from collections import Counter

import psycopg2

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.setrecord import slot_name
from tests.helpers import RelayProcess, assert_verified, caught_up, messages, pgshovel, verify, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)

STREAMING = {"PGSHOVEL_LOGICAL_DECODING_WORK_MEM": "64kB"}


def _set(stack, cluster, db, schema, tmp_path, name: str) -> tuple[str, str, str]:  # noqa: F811
    """A pgoutput set name on <schema>.t (id int PRIMARY KEY, n int, pad text): (table, its topic,
    the transactions topic)."""
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, pad text)")
    prefix = f"{name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding="json", backend="pgoutput",
                       topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    return table, names.table_topic(prefix, schema, "t"), names.transactions_topic(prefix)


def _relay(stack, cluster, name: str, tmp_path, *args: str, failpoints: str = "") -> RelayProcess:  # noqa: F811
    spill = tmp_path / "spill"
    spill.mkdir(exist_ok=True)
    env = {**STREAMING, "PGSHOVEL_SPILL_DIR": str(spill)}
    if failpoints:
        env["PGSHOVEL2_FAILPOINTS"] = failpoints
    log = tmp_path / f"{name}-{len(list(tmp_path.glob(f'{name}-*.log')))}.log"
    return RelayProcess(stack, cluster, name, *args, log_path=log, extra_env=env)


def _streamed(stack, cluster, name: str, at_least: int = 1, timeout: float = 60) -> int:  # noqa: F811
    """Wait until the set's slot has streamed at least at_least transactions; returns how many."""
    slot, deadline, count = slot_name(cluster, name), time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        conn = psycopg2.connect(stack.dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
        finally:
            conn.close()
        count = row[0] if row else 0
        if count >= at_least:
            return count
        time.sleep(0.2)
    raise AssertionError(f"slot {slot} streamed {count} transaction(s), not {at_least}")


def _txn(stack) -> psycopg2.extensions.connection:  # noqa: F811
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = False
    return conn


def test_streamed_transaction_once_in_commit_order(stack, cluster, db, schema, tmp_path):  # noqa: F811
    table, topic, txn_topic = _set(stack, cluster, db, schema, tmp_path, "big")
    relay = _relay(stack, cluster, "big", tmp_path)
    relay.wait_for("snapshot done")
    rows = 200_000
    big = _txn(stack)
    with big.cursor() as cur:
        cur.execute("SELECT txid_current()")
        big_txid = cur.fetchone()[0]
        cur.execute(f"INSERT INTO {table} SELECT g, 0, repeat('x', 40) FROM generate_series(1, {rows // 2}) g")
        _streamed(stack, cluster, "big")  # the first half is out, the transaction still open
        with db.cursor() as small:
            small.execute(f"INSERT INTO {table} VALUES (0, 1, 'small') RETURNING txid_current()")
            small_txid = small.fetchone()[0]
        cur.execute(f"INSERT INTO {table} SELECT g, 0, repeat('y', 40) FROM generate_series({rows // 2 + 1}, "
                    f"{rows}) g")
    big.commit()
    big.close()
    caught_up(stack, cluster, "big", timeout=300)
    got = messages(stack, topic)
    assert [k["id"] for k, _, _ in got] == list(range(rows + 1))  # the small one first, then in order
    assert {h["pgshovel.op"] for _, _, h in got} == {"c"}
    positions = [h["pgshovel.position"] for _, _, h in got]
    assert positions == sorted(positions)
    records = [v for _, v, _ in messages(stack, txn_topic)]
    assert [(r["type"], r["txid"]) for r in records] == [("BEGIN", small_txid), ("END", small_txid),
                                                         ("BEGIN", big_txid), ("END", big_txid)]
    assert [r["event_count"] for r in records if r["type"] == "END"] == [1, rows]
    assert "replaying streamed transaction" in relay.log()
    assert relay.stop() == 0
    assert_verified(verify(stack, cluster, "big"))


def test_savepoints_and_aborts_in_streamed_transactions(stack, cluster, db, schema, tmp_path):  # noqa: F811
    table, topic, txn_topic = _set(stack, cluster, db, schema, tmp_path, "sp")
    relay = _relay(stack, cluster, "sp", tmp_path)
    relay.wait_for("snapshot done")

    def insert(cur, first: int, last: int) -> None:
        cur.execute(f"INSERT INTO {table} SELECT g, 0, 'p' FROM generate_series({first}, {last}) g")

    conn = _txn(stack)
    with conn.cursor() as cur:
        insert(cur, 1, 30_000)
        cur.execute("SAVEPOINT a")
        insert(cur, 30_001, 60_000)
        cur.execute("ROLLBACK TO SAVEPOINT a")  # gone
        cur.execute("SAVEPOINT b")
        insert(cur, 60_001, 90_000)
        cur.execute("RELEASE SAVEPOINT b")  # kept
        cur.execute("SAVEPOINT c")
        insert(cur, 90_001, 100_000)
        cur.execute("SAVEPOINT d")
        insert(cur, 100_001, 120_000)
        cur.execute("RELEASE SAVEPOINT d")
        cur.execute(f"UPDATE {table} SET n = 9 WHERE id <= 10")
        cur.execute("ROLLBACK TO SAVEPOINT c")  # c, its released child d and the update: gone
        insert(cur, 120_001, 130_000)
        cur.execute(f"UPDATE {table} SET n = 2 WHERE id <= 5")
    conn.commit()
    with conn.cursor() as cur:  # a large aborted transaction: nothing of it
        insert(cur, 200_001, 260_000)
    # streamed while still open: PostgreSQL 18 no longer streams a transaction it already knows aborted
    _streamed(stack, cluster, "sp", 2)
    conn.rollback()
    conn.close()
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (0, 0, 'last')")
    caught_up(stack, cluster, "sp", timeout=300)
    assert _streamed(stack, cluster, "sp", 2) >= 2
    kept = [*range(1, 30_001), *range(60_001, 90_001), *range(120_001, 130_001)]
    got = [(k["id"], h["pgshovel.op"], v and v["n"]) for k, v, h in messages(stack, topic)]
    assert got == [(i, "c", 0) for i in kept] + [(i, "u", 2) for i in range(1, 6)] + [(0, "c", 0)]
    ends = [v["event_count"] for _, v, _ in messages(stack, txn_topic) if v["type"] == "END"]
    assert ends == [len(kept) + 5, 1]
    log = relay.log()
    assert log.count("replaying streamed transaction") == 1 and "aborted: its spill file is dropped" in log
    assert relay.stop() == 0
    assert_verified(verify(stack, cluster, "sp"))


def test_relay_killed_while_producing_a_streamed_transaction(stack, cluster, db, schema, tmp_path):  # noqa: F811
    table, topic, txn_topic = _set(stack, cluster, db, schema, tmp_path, "kill")
    first = _relay(stack, cluster, "kill", tmp_path)
    first.wait_for("snapshot done")
    assert first.stop() == 0
    rows = 100_000
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, 0, 'k' FROM generate_series(1, {rows}) g")
    kills = resumed = 0
    while resumed < 3 and kills < 40:  # split inside the transaction every 10 x 500 messages
        relay = _relay(stack, cluster, "kill", tmp_path, "--max-transaction-messages", "500",
                       failpoints="before_commit=0.2,after_commit=0.3")
        assert relay.proc.wait(180) == -signal.SIGKILL, relay.log()
        if "replaying streamed transaction" not in relay.log():
            break  # the transaction was all in Kafka already: killed at a later commit
        kills += 1
        resumed += "after its first" in relay.log()
    relay = _relay(stack, cluster, "kill", tmp_path)
    caught_up(stack, cluster, "kill", timeout=300)
    assert relay.stop() == 0
    assert resumed >= 3, "too few kills landed inside the streamed transaction"
    assert _streamed(stack, cluster, "kill") >= 1
    got = messages(stack, topic)
    assert Counter(k["id"] for k, _, _ in got) == Counter(range(1, rows + 1))
    positions = [h["pgshovel.position"] for _, _, h in got]
    assert positions == sorted(positions)
    records = [v for _, v, _ in messages(stack, txn_topic)]
    assert [r["type"] for r in records] == ["BEGIN", "END"] and records[1]["event_count"] == rows
    assert_verified(verify(stack, cluster, "kill"))


def test_add_column_inside_a_streamed_transaction(stack, cluster, db, schema, tmp_path):  # noqa: F811
    table, topic, _ = _set(stack, cluster, db, schema, tmp_path, "ddl")
    relay = _relay(stack, cluster, "ddl", tmp_path)
    relay.wait_for("snapshot done")
    conn = _txn(stack)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, 0, 'before' FROM generate_series(1, 20000) g")
        cur.execute(f"ALTER TABLE {table} ADD COLUMN extra text")
        cur.execute(f"INSERT INTO {table} SELECT g, 1, 'after', 'e' || g FROM generate_series(20001, 40000) g")
    conn.commit()
    conn.close()
    caught_up(stack, cluster, "ddl", timeout=300)
    got = messages(stack, topic)
    assert [k["id"] for k, _, _ in got] == list(range(1, 40_001))
    assert all("extra" not in v for _, v, _ in got[:20_000])
    assert all(v["extra"] == f"e{v['id']}" and v["pad"] == "after" for _, v, _ in got[20_000:])
    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("ddl") == [1, 2]
    assert "replaying streamed transaction" in relay.log()
    assert _streamed(stack, cluster, "ddl") >= 1
    assert relay.stop() == 0
    with db.cursor() as cur:  # rows of version 1 have no extra (JSON: no reader schema fills it in)
        cur.execute(f"SELECT id, n, pad, extra FROM {table} ORDER BY id")
        assert [(v["id"], v["n"], v["pad"], v.get("extra")) for _, v, _ in got] == cur.fetchall()
