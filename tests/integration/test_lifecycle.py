"""Set lifecycle with ZooKeeper and the database kept in agreement: upgrade while
writes and the relay run, dry runs, two admins at once, and admin commands
SIGKILLed at each step of their two-phase commit followed by ``cluster recover``."""

import signal
import subprocess
import threading
import time

import psycopg2
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.setrecord import queue_name, trigger_name
from tests.helpers import BIN, caught_up, cli_env, messages, pgshovel, write_config


def capture_state(db, cluster: str, set_name: str, schema: str) -> dict:
    """What the database holds for the set: {table: captured attnums}, queue present, prepared gids."""
    trig = trigger_name(cluster, set_name)
    with db.cursor() as cur:
        cur.execute("SELECT c.relname, encode(t.tgargs, 'escape') FROM pg_trigger t "
                    "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND t.tgname = %s", (schema, trig))
        tables = {name: args.split("\\000")[2] for name, args in cur.fetchall()}
        cur.execute("SELECT count(*) FROM pgq.queue WHERE queue_name = %s", (queue_name(cluster, set_name),))
        queue = cur.fetchone()[0] == 1
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"pgshovel2:{cluster}:%",))
        prepared = [r[0] for r in cur.fetchall()]
    return {"tables": tables, "queue": queue, "prepared": prepared}


def zk_state(stack, cluster: str, set_name: str) -> dict | None:
    """{table: captured attnums} and version of the set's current ZooKeeper record; None if absent."""
    with ClusterStore(stack.zk, cluster) as store:
        if not store.exists(set_name):
            return None
        record, _ = store.get_set(set_name)
    return {"version": record.version,
            "tables": {t.name: ",".join(str(c.attnum) for c in t.columns) for t in record.tables}}


def assert_agree(stack, db, cluster: str, set_name: str, schema: str) -> dict | None:
    """ZooKeeper and the database describe the same capture, and nothing is left prepared."""
    zk, pg = zk_state(stack, cluster, set_name), capture_state(db, cluster, set_name, schema)
    assert pg["prepared"] == []
    if zk is None:
        assert pg["tables"] == {} and not pg["queue"]
    else:
        assert pg["tables"] == zk["tables"] and pg["queue"]
    return zk


@pytest.fixture
def two_tables(db, schema):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".a (id int PRIMARY KEY, v text, w int)')
        cur.execute(f'CREATE TABLE "{schema}".b (id int PRIMARY KEY, x text)')
    return schema


def _writer(dsn: str, schema: str, stop: threading.Event, written: list) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    i = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            i += 1
            cur.execute(f'INSERT INTO "{schema}".a VALUES (%s, %s, %s)', (i, f"v{i}", i))
            cur.execute(f'INSERT INTO "{schema}".b VALUES (%s, %s)', (i, f"x{i}"))
            written.append(i)
    conn.close()


def test_upgrade_adds_table_and_column_while_writing(stack, cluster, db, two_tables, tmp_path, relay_factory):
    schema = two_tables
    v1 = write_config(tmp_path, stack, [{"schema": schema, "name": "a", "columns": ["v"]}], topic_prefix=cluster)
    v2 = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}, {"schema": schema, "name": "b"}],
                      topic_prefix=cluster)
    pgshovel(stack, cluster, "set", "create", "up", str(v1))
    relay = relay_factory("up")
    relay.wait_for("snapshot done")
    stop, written = threading.Event(), []
    writer = threading.Thread(target=_writer, args=(stack.dsn, schema, stop, written))
    writer.start()
    try:
        while len(written) < 200:
            stop.wait(0.05)
        dry = pgshovel(stack, cluster, "set", "upgrade", "up", str(v2), "--dry-run").stdout
        assert "version 1 -> 2" in dry and "columns added: w" in dry and "added table" in dry
        assert "dry run: nothing was changed" in dry
        assert assert_agree(stack, db, cluster, "up", schema)["version"] == 1
        # the online snapshot of the table added (the default) is test_online_snapshot's
        out = pgshovel(stack, cluster, "set", "upgrade", "up", str(v2), "--no-snapshot").stdout
        assert "version 1 -> 2" in out
        at_upgrade = len(written)
        while len(written) < at_upgrade + 200:
            stop.wait(0.05)
    finally:
        stop.set()
        writer.join()
    assert assert_agree(stack, db, cluster, "up", schema)["version"] == 2
    caught_up(stack, cluster, "up")
    a_msgs = [(k["id"], v, h) for k, v, h in messages(stack, f"{cluster}.{schema}.a") if h["pgshovel.op"] != "r"]
    assert sorted(i for i, _, _ in a_msgs) == sorted(written)  # every insert once, across the switch
    for i, value, headers in a_msgs:  # each row under the schema of the version that captured it
        assert ("w" in value) == (headers["pgshovel.version"] == "2"), (i, value, headers)
        if "w" in value:
            assert value["w"] == i
    versions = [h["pgshovel.version"] for _, _, h in a_msgs]
    assert versions == sorted(versions) and "1" in versions and "2" in versions
    b_ids = [k["id"] for k, _, h in messages(stack, f"{cluster}.{schema}.b")]
    first_b = min(b_ids)  # b is captured from the upgrade's commit on, each row once
    assert sorted(b_ids) == list(range(first_b, max(written) + 1)) and first_b > 1
    history = pgshovel(stack, cluster, "set", "inspect", "up", "--history").stdout.splitlines()
    assert [line.split()[1] for line in history] == ["1", "2"] and "upgrade" in history[1]
    old = pgshovel(stack, cluster, "set", "inspect", "up", "--version", "1").stdout
    assert "version 1" in old and "    w:" not in old
    assert relay.stop() == 0


def test_upgrade_refuses_immutable_fields_and_changes_nothing(stack, cluster, db, two_tables, tmp_path):
    schema = two_tables
    v1 = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}])
    pgshovel(stack, cluster, "set", "create", "im", str(v1))
    json_cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}], encoding="json")
    proc = pgshovel(stack, cluster, "set", "upgrade", "im", str(json_cfg), check=False)
    assert proc.returncode == 1 and "encoding: cannot change on upgrade" in proc.stderr
    same = pgshovel(stack, cluster, "set", "upgrade", "im", str(v1)).stdout
    assert "already matches" in same
    assert assert_agree(stack, db, cluster, "im", schema)["version"] == 1


def test_concurrent_upgrades_one_wins(stack, cluster, db, two_tables, tmp_path):
    schema = two_tables
    base = write_config(tmp_path, stack, [{"schema": schema, "name": "a", "columns": ["v"]}])
    pgshovel(stack, cluster, "set", "create", "cc", str(base))
    configs = [write_config(tmp_path, stack, [{"schema": schema, "name": "a"}]),
               write_config(tmp_path, stack, [{"schema": schema, "name": "a", "columns": ["v"]},
                                              {"schema": schema, "name": "b"}])]
    blocker = psycopg2.connect(stack.dsn)  # holds both admins inside their database work
    with blocker.cursor() as cur:
        cur.execute(f'LOCK TABLE "{schema}".a, "{schema}".b IN SHARE MODE')
    procs = [subprocess.Popen([str(BIN / "pgshovel"), "set", "upgrade", "cc", str(c)], env=cli_env(stack, cluster),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in configs]
    try:
        _wait_lock_waiters(db, 2)
    except AssertionError:
        for p in procs:
            p.kill()
        raise AssertionError([p.communicate() for p in procs]) from None
    finally:
        blocker.rollback()
        blocker.close()
    results = [(p.wait(120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "changed by someone else" in loser or "another command holds" in loser, loser
    state = assert_agree(stack, db, cluster, "cc", schema)
    assert state["version"] == 2


def _wait_lock_waiters(db, n: int, timeout: float = 60) -> None:
    """Wait until n backends wait for a lock (both admins read ZooKeeper and began their work)."""
    deadline = time.monotonic() + timeout
    with db.cursor() as cur:
        while True:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            if cur.fetchone()[0] >= n:
                return
            assert time.monotonic() < deadline, "the admin commands never reached the table lock"
            time.sleep(0.05)


STEPS = [("admin_before_prepare", False), ("admin_prepared", False), ("admin_zk_done", True)]


def _run_killed(stack, cluster: str, failpoint: str, *args: str) -> None:
    env = {**cli_env(stack, cluster), "PGSHOVEL2_FAILPOINTS": f"{failpoint}=1"}
    proc = subprocess.run([str(BIN / "pgshovel"), *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("failpoint, applied", STEPS)
@pytest.mark.parametrize("action", ["create", "upgrade", "drop"])
def test_admin_killed_at_each_step_then_recover(stack, cluster, db, two_tables, tmp_path, action, failpoint,
                                                applied):
    schema = two_tables
    v1 = write_config(tmp_path, stack, [{"schema": schema, "name": "a", "columns": ["v"]}])
    v2 = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}, {"schema": schema, "name": "b"}])
    if action != "create":
        pgshovel(stack, cluster, "set", "create", "k", str(v1))
    before = zk_state(stack, cluster, "k")
    args = {"create": ("set", "create", "k", str(v1)), "upgrade": ("set", "upgrade", "k", str(v2)),
            "drop": ("set", "drop", "k")}[action]
    _run_killed(stack, cluster, failpoint, *args)
    if failpoint != "admin_before_prepare":
        assert capture_state(db, cluster, "k", schema)["prepared"], "the kill left nothing prepared"
    out = pgshovel(stack, cluster, "cluster", "recover").stdout
    verb = "committed" if applied else ("rolled back" if failpoint == "admin_prepared" else "removed the intent")
    assert verb in out and action in out, out
    after = assert_agree(stack, db, cluster, "k", schema)
    expected_version = {"create": 1, "upgrade": 2, "drop": None}[action] if applied else (before or {}).get("version")
    assert (after or {}).get("version") == expected_version
    assert "nothing to recover" in pgshovel(stack, cluster, "cluster", "recover").stdout
    assert "unfinished admin command" not in pgshovel(stack, cluster, "cluster", "inspect").stdout
