"""The relay against the real stack: every operation, primary-key updates,
snapshot + stream while writers run, SIGKILL mid-batch, quoted identifiers."""

import random
import re
import signal
import threading
import time

import psycopg2
import pytest

from pgshovel2 import names
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config


@pytest.fixture(params=["trigger", "logical", "pgoutput"])
def backend(request) -> str:
    """The capture backend of the contract tests here; pgoutput: logical with decoder pgoutput."""
    return request.param


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_operations_and_key_update(stack, cluster, db, schema, tmp_path, relay_factory, encoding, backend):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (1, \'existing\')')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding=encoding,
                       topic_prefix=f"ops{encoding}{cluster}", backend=backend)
    pgshovel(stack, cluster, "set", "create", "ops", str(cfg))
    relay = relay_factory("ops")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t VALUES (2, \'two\'), (3, \'three\')')
        cur.execute(f'UPDATE "{schema}".t SET v = \'TWO\' WHERE id = 2')
        cur.execute(f'DELETE FROM "{schema}".t WHERE id = 3')
        cur.execute(f'UPDATE "{schema}".t SET id = 20 WHERE id = 2')
    caught_up(stack, cluster, "ops")
    topic = names.table_topic(f"ops{encoding}{cluster}", schema, "t")
    got = [(k["id"], v and v["v"], h["pgshovel.op"]) for k, v, h in messages(stack, topic)]
    assert got == [(1, "existing", "r"), (2, "two", "c"), (3, "three", "c"), (2, "TWO", "u"),
                   (3, None, "d"), (2, None, "d"), (20, "TWO", "c")]
    assert_verified(verify(stack, cluster, "ops"))

    with db.cursor() as cur:
        cur.execute(f'TRUNCATE "{schema}".t')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (7, \'after truncate\')')
    caught_up(stack, cluster, "ops")
    txn = messages(stack, names.transactions_topic(f"ops{encoding}{cluster}"))
    kinds = [v["type"] for _, v, _ in txn]
    assert kinds.count("TRUNCATE") == 1 and kinds.count("BEGIN") == kinds.count("END") == 6
    ends = [v for _, v, _ in txn if v["type"] == "END"]
    assert ends[0]["event_count"] == 2 and ends[0]["data_collections"][0]["data_collection"] == topic
    assert_verified(verify(stack, cluster, "ops"))
    assert relay.stop() == 0


def writer(dsn: str, table: str, stop: threading.Event, seed: int) -> int:
    """Random inserts, updates, key updates and deletes until stop; returns txn count."""
    rnd = random.Random(seed)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    done = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            k = rnd.randrange(1, 30000)
            op = rnd.random()
            if op < 0.4:
                cur.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (k,))
            elif op < 0.7:
                cur.execute(f"INSERT INTO {table} VALUES (%s, 0, 'w') ON CONFLICT (id) DO NOTHING", (k,))
            elif op < 0.85:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
            else:
                try:
                    cur.execute(f"UPDATE {table} SET id = %s WHERE id = %s",
                                (rnd.randrange(100_000, 2**31 - 1), k))
                except psycopg2.errors.UniqueViolation:
                    continue
            done += 1
    conn.close()
    return done


def start_writers(stack, table: str, count: int = 2):
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(stack.dsn, table, stop, i)) for i in range(count)]
    for t in threads:
        t.start()
    return stop, threads


def filled_set(stack, cluster, db, schema, tmp_path, set_name: str, rows: int, backend: str = "trigger") -> str:
    """Create table <schema>.<set_name> with rows rows and a set on it; returns the table."""
    table = f'"{schema}".{set_name}'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {table} SELECT g, 0, repeat('x', 200) FROM generate_series(1, %s) g",
                    (rows,))
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": set_name}],
                       topic_prefix=f"{set_name}{cluster}", backend=backend)
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    return table


def test_snapshot_and_stream_equal_source_with_writers(stack, cluster, db, schema, tmp_path, relay_factory,
                                                       backend):
    table = filled_set(stack, cluster, db, schema, tmp_path, "snap", 60000, backend)
    stop, threads = start_writers(stack, table)
    time.sleep(0.5)
    relay = relay_factory("snap")
    relay.wait_for("snapshot done")
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join()
    rows = int(re.search(r"snapshot done: (\d+) rows", relay.log()).group(1))
    assert 50_000 < rows < 70_000  # read while the writers ran
    caught_up(stack, cluster, "snap")
    assert_verified(verify(stack, cluster, "snap"))


def test_sigkill_mid_batch_loses_nothing(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    table = filled_set(stack, cluster, db, schema, tmp_path, "kill", 30000, backend)
    stop, threads = start_writers(stack, table)
    kills = 0
    for _ in range(3):
        relay = relay_factory("kill")
        time.sleep(random.uniform(1.5, 3.0))
        assert relay.proc.poll() is None, relay.log()
        relay.stop(signal.SIGKILL)
        kills += 1
    with db.cursor() as cur:  # one big batch, killed while it is relayed
        cur.execute(f"UPDATE {table} SET n = n + 1")
    relay = relay_factory("kill")
    relay.wait_for("relaying set")
    time.sleep(0.3)
    relay.stop(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join()
    relay_factory("kill")
    caught_up(stack, cluster, "kill", timeout=120)
    assert_verified(verify(stack, cluster, "kill"))
    assert kills == 3


IDENTIFIERS = ['Mixed Case', 'with space', 'dot.ted', 'quo"te', 'nön-ascii ✓', 'x' * 63]


def test_quoted_identifiers(stack, cluster, db, tmp_path, relay_factory, backend):
    schema = f'Sch.ema "{cluster}"'
    table = 'Täble "1".x'
    cols = ", ".join(f'"{c.replace(chr(34), chr(34) * 2)}" text' for c in IDENTIFIERS)
    qualified = names.qualified(schema, table)
    with db.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {names.quote_ident(schema)}")
        cur.execute(f'CREATE TABLE {qualified} ("Ïd" int PRIMARY KEY, {cols})')
        cur.execute(f"INSERT INTO {qualified} VALUES (1, 'a', 'b', 'c', 'd', 'e', 'f')")
    try:
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": table,
                                              "columns": IDENTIFIERS[:4]}], backend=backend)
        pgshovel(stack, cluster, "set", "create", "ids", str(cfg))
        relay_factory("ids").wait_for("snapshot done")
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {qualified} VALUES (2, 'g', 'h', 'i', 'j', 'k', 'l')")
            cur.execute(f'UPDATE {qualified} SET "nön-ascii ✓" = \'not captured\' WHERE "Ïd" = 1')
            cur.execute(f'UPDATE {qualified} SET "Mixed Case" = \'A\' WHERE "Ïd" = 1')
        caught_up(stack, cluster, "ids")
        topic = names.table_topic("ids", schema, table)
        assert topic == "ids.Sch_x2eema_x20_x22" + cluster + "_x22.T_xc3_xa4ble_x20_x221_x22_x2ex"
        got = messages(stack, topic)
        assert [h["pgshovel.op"] for _, _, h in got] == ["r", "c", "u"]
        value = got[-1][1]
        assert set(value) == {"_xc3_x8fd", "Mixed_x20Case", "with_x20space", "dot_x2eted", "quo_x22te"}
        assert value["Mixed_x20Case"] == "A"
        assert_verified(verify(stack, cluster, "ids"))
    finally:
        with db.cursor() as cur:
            cur.execute(f"DROP SCHEMA {names.quote_ident(schema)} CASCADE")
