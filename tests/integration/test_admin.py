"""Set administration against real ZooKeeper and PostgreSQL: create, list,
inspect, drop, and bad input that must change nothing."""

import concurrent.futures
import time

import psycopg2
import pytest

from tests.helpers import pgshovel, write_config


def capture_objects(db, schema: str) -> dict:
    """Triggers on the schema's tables and pgshovel2 queues in the database."""
    with db.cursor() as cur:
        cur.execute("SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                    "AND NOT t.tgisinternal ORDER BY 1", (schema,))
        triggers = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT to_regclass('pgq.queue') IS NOT NULL")
        queues = []
        if cur.fetchone()[0]:
            cur.execute("SELECT queue_name FROM pgq.queue ORDER BY 1")
            queues = [r[0] for r in cur.fetchall()]
    return {"triggers": triggers, "queues": queues}


@pytest.fixture
def tables(db, schema):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".keyed (id int PRIMARY KEY, v text, w int)')
        cur.execute(f'CREATE TABLE "{schema}".unkeyed (v text)')
    return schema


def test_create_list_inspect_drop(stack, cluster, db, tables, tmp_path):
    cfg = write_config(tmp_path, stack, [{"schema": tables, "name": "keyed", "columns": ["v"]}])
    out = pgshovel(stack, cluster, "set", "create", "s1", str(cfg)).stdout
    assert "created set 's1' (version 1" in out
    assert pgshovel(stack, cluster, "set", "list").stdout.startswith("s1\tversion 1\t1 table(s)")
    inspect = pgshovel(stack, cluster, "set", "inspect", "s1").stdout
    assert "key: id (primary key)" in inspect and "    v: text" in inspect and "    w:" not in inspect
    objects = capture_objects(db, tables)
    assert len(objects["triggers"]) == 2 and f"pgshovel2.{cluster}.s1" in objects["queues"]

    second = pgshovel(stack, cluster, "set", "create", "s1", str(cfg), check=False)
    assert second.returncode == 1 and "already exists" in second.stderr

    out = pgshovel(stack, cluster, "set", "drop", "s1").stdout
    assert "queue pgshovel2." in out and "consumer pgshovel2_relay" in out
    after = capture_objects(db, tables)
    assert after["triggers"] == [] and f"pgshovel2.{cluster}.s1" not in after["queues"]
    assert pgshovel(stack, cluster, "set", "list").stdout == ""


@pytest.mark.parametrize("entry, field, message", [
    ({"name": "missing"}, "tables[0].name", "no table"),
    ({"name": "keyed", "columns": ["v", "nope"]}, "tables[0].columns[1]", "no column \"nope\""),
    ({"name": "keyed", "key": ["nope"]}, "tables[0].key[0]", "no column"),
    ({"name": "unkeyed"}, "tables[0].name", "has no primary key"),
])
def test_bad_configs_change_nothing(stack, cluster, db, tables, tmp_path, entry, field, message):
    before = capture_objects(db, tables)
    cfg = write_config(tmp_path, stack, [{"schema": tables, **entry}])
    proc = pgshovel(stack, cluster, "set", "create", "bad", str(cfg), check=False)
    assert proc.returncode == 1
    assert f"{cfg}: {field}: " in proc.stderr and message in proc.stderr
    assert capture_objects(db, tables) == before
    assert pgshovel(stack, cluster, "set", "list").stdout == ""


def test_unkeyed_table_allowed_when_declared(stack, cluster, db, tables, tmp_path):
    cfg = write_config(tmp_path, stack, [{"schema": tables, "name": "unkeyed", "allow_unkeyed": True}])
    pgshovel(stack, cluster, "set", "create", "u", str(cfg))
    assert "key: (unkeyed)" in pgshovel(stack, cluster, "set", "inspect", "u").stdout
    pgshovel(stack, cluster, "set", "drop", "u")


def test_malformed_yaml_changes_nothing(stack, cluster, db, tables, tmp_path):
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("database: {dsn: x\ntables: [")
    proc = pgshovel(stack, cluster, "set", "create", "m", str(cfg), check=False)
    assert proc.returncode == 1 and f"{cfg}: line" in proc.stderr and "malformed YAML" in proc.stderr
    assert pgshovel(stack, cluster, "set", "list").stdout == ""


def test_zookeeper_unreachable_changes_nothing(stack, db, tables, tmp_path):
    cfg = write_config(tmp_path, stack, [{"schema": tables, "name": "keyed"}])
    before = capture_objects(db, tables)
    env_stack = type("S", (), {**stack.__dict__, "zk": "127.0.0.1:1"})()
    proc = pgshovel(env_stack, "x", "set", "create", "z", str(cfg), check=False)
    assert proc.returncode == 1 and "cannot reach ZooKeeper at 127.0.0.1:1" in proc.stderr
    assert capture_objects(db, tables) == before


def test_database_unreachable_changes_nothing(stack, cluster, tmp_path):
    cfg = write_config(tmp_path, stack, [{"name": "t"}])
    cfg.write_text(cfg.read_text().replace(stack.dsn, "host=127.0.0.1 port=1 dbname=x"))
    proc = pgshovel(stack, cluster, "set", "create", "d", str(cfg), check=False)
    assert proc.returncode == 1 and "cannot connect to the database of set 'd'" in proc.stderr
    assert pgshovel(stack, cluster, "set", "list").stdout == ""


def test_uninitialized_cluster(stack):
    proc = pgshovel(stack, "never_initialized", "set", "list", check=False)
    assert proc.returncode == 1 and "run 'pgshovel cluster initialize'" in proc.stderr


def _waiting_for(db, relation: str) -> bool:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass", (relation,))
        return cur.fetchone()[0] > 0


def test_drop_deadlocked_with_the_ticker_is_tried_again(stack, cluster, db, tables, tmp_path, monkeypatch):
    """pgq.ticker() reads the event sequence, then takes the tick sequence; pgq.drop_queue drops
    them the other way round. The drop, chosen as the deadlock's victim, starts over and succeeds."""
    cfg = write_config(tmp_path, stack, [{"schema": tables, "name": "keyed"}])
    pgshovel(stack, cluster, "set", "create", "s1", str(cfg))
    queue = f"pgshovel2.{cluster}.s1"
    with db.cursor() as cur:
        cur.execute("SELECT queue_event_seq, queue_tick_seq FROM pgq.queue WHERE queue_name = %s", (queue,))
        event_seq, tick_seq = cur.fetchone()
    ticker = psycopg2.connect(stack.dsn)
    monkeypatch.setenv("PGOPTIONS", "-c deadlock_timeout=3s")  # the drop's session: the victim
    with ticker.cursor() as tcur:
        tcur.execute("SET deadlock_timeout = '60s'")
        tcur.execute(f"SELECT last_value FROM {event_seq}")  # as pgq.ticker() does first
        drop = concurrent.futures.ThreadPoolExecutor(1).submit(pgshovel, stack, cluster, "set", "drop", "s1",
                                                               check=False)
        deadline = time.monotonic() + 60
        while not _waiting_for(db, event_seq):
            assert time.monotonic() < deadline and not drop.done(), drop.result() if drop.done() else "no wait"
            time.sleep(0.05)
        tcur.execute(f"SELECT nextval('{tick_seq}')")  # then the tick: returns once the drop gave way
        ticker.commit()
    ticker.close()
    proc = drop.result(timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "deadlocked with another session" in proc.stderr and "trying again (2 of 3)" in proc.stderr
    assert queue not in capture_objects(db, tables)["queues"]
    assert pgshovel(stack, cluster, "set", "list").stdout == ""
