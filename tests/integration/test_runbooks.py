"""The runbooks of docs/runbooks.rst, each run verbatim (tests/runbook.py) on real servers:
a primary and its streaming replica (pg_basebackup) on extra ports for the promotions,
the session stack for the others."""

import os
import re
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest

from tests.chaos import ChaosRun, Load
from tests.helpers import BIN, RelayProcess, caught_up, cli_env, pgshovel, verify, write_config
from tests.integration.test_failover_slots import run_writers, stop_writers
from tests.online import wait_state
from tests.pgservers import PG_BIN, PgServer, extra_port
from tests.runbook import run_step

PGQD_INI = """[pgqd]
base_connstr = host=127.0.0.1 port={port} user=postgres
initial_database = pgshovel
logfile = {dir}/pgqd.log
pidfile = {dir}/pgqd.pid
ticker_period = 0.2
"""


@pytest.fixture
def pair():
    """(primary, replica): a fresh primary with a streaming replica named replica1."""
    primary, replica = PgServer("p1", extra_port(1)), PgServer("r1", extra_port(2))
    for s in (primary, replica):
        s.destroy()
    primary.start()
    primary.script("start", "pgqd")
    replica.basebackup_from(primary, "replica1")
    yield primary, replica
    for s in (replica, primary):
        s.destroy()


def env_for(stack, cluster, primary, replica, set_name, tmp_path) -> dict:
    pgqd_dir = replica.dir / "pgqd"
    pgqd_dir.mkdir(parents=True, exist_ok=True)
    ini = pgqd_dir / "pgqd.ini"
    ini.write_text(PGQD_INI.format(port=replica.port, dir=pgqd_dir))
    return {**cli_env(stack, cluster), "SET": set_name, "PG_BIN": PG_BIN, "OLD_DATA": str(primary.data),
            "NEW_DATA": str(replica.data), "NEW_DSN": replica.dsn, "PGQD_INI": str(ini)}


def proxy_stack(stack, server):
    """The session stack (ZooKeeper, Kafka, registry) with server as its PostgreSQL."""
    return SimpleNamespace(dsn=server.dsn, env={**stack.env, "PG_PORT": str(server.port)}, zk=stack.zk,
                           bootstrap=stack.bootstrap, registry=stack.registry)


def make_chaos(stack, cluster, primary, tmp_path) -> ChaosRun:
    conn = primary.connect()
    with conn.cursor() as cur:
        cur.execute('CREATE SCHEMA "s1"')
    run = ChaosRun(proxy_stack(stack, primary), cluster, conn, "s1", tmp_path, kills=0)
    run.create_set()
    return run


def test_planned_promotion(stack, cluster, pair, tmp_path):
    primary, replica = pair
    run = make_chaos(stack, cluster, primary, tmp_path)
    relay = run.start_relay()
    relay.wait_for("snapshot done")
    with run.db.cursor() as cur:
        cur.execute('INSERT INTO "s1".accounts SELECT g, g, \'before\' FROM generate_series(1, 500) g')
    env = env_for(stack, cluster, primary, replica, run.set_name, tmp_path)
    run_step("planned/drain", env)
    run.db.close()
    run_step("planned/promote", env)
    run_step("planned/repoint", env)
    relay.wait_for("repointed", timeout=60)
    conn = replica.connect()
    with conn.cursor() as cur:
        cur.execute('UPDATE "s1".accounts SET balance = balance + 1 WHERE id <= 100')
        cur.execute('INSERT INTO "s1".tags VALUES (1, 2, \'after\')')
    conn.close()
    out = run_step("planned/check", env)
    assert "DIFFERENT" not in out and out.count(": ok") == 3, out
    assert relay.proc.poll() is None, relay.log()


def test_unplanned_promotion_sync_replica_loses_nothing(stack, cluster, pair, tmp_path):
    primary, replica = pair
    primary.query("ALTER SYSTEM SET synchronous_standby_names = 'replica1'")
    primary.query("SELECT pg_reload_conf()")
    time.sleep(1)
    assert primary.query("SELECT sync_state FROM pg_stat_replication") == [("sync",)]
    run = make_chaos(stack, cluster, primary, tmp_path)
    relay = run.start_relay()
    relay.wait_for("snapshot done")
    run._register_audit()
    load = Load(run.stack, '"s1"', tmp_path, rate=100)
    load.start()
    time.sleep(8)
    primary.kill()  # SIGKILL under load, mid-relay
    load.stop()
    env = env_for(stack, cluster, primary, replica, run.set_name, tmp_path)
    run_step("unplanned/promote", env)
    run.stack.dsn = replica.dsn  # ground truth: the audit consumer's queue on the promoted replica
    run._compare()
    report = run.report
    report.dump(tmp_path / "unplanned-report.json")
    print("unplanned promotion:", report)
    assert report.expected_messages > 100, report
    assert (report.lost, report.duplicated) == (0, 0), report
    assert report.transactions_duplicated == 0 and report.state_equal, report.transactions_problem()
    assert relay.proc.poll() is None, relay.log()


def test_other_runbooks(stack, cluster, db, schema, relay_factory, tmp_path):
    """cluster upgrade, adding a table to a busy set, a stalled relay, dropping the set."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".a (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".b (id int PRIMARY KEY, v text)')
        cur.execute(f'INSERT INTO "{schema}".b SELECT g, \'old\' FROM generate_series(1, 10) g')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "a"}])
    pgshovel(stack, cluster, "set", "create", "ops", str(cfg))
    relay = relay_factory("ops")
    relay.wait_for("snapshot done")
    env = {**cli_env(stack, cluster), "SET": "ops", "RELAY_LOG": str(tmp_path / "relay2.log"),
           "RELAY_PID": str(tmp_path / "relay2.pid"),
           "CONFIG": str(write_config(tmp_path, stack, [{"schema": schema, "name": n} for n in ("a", "b")]))}
    load = Load(stack, f'"{schema}"', tmp_path, rate=50)  # busy: a write every 20 ms to table a
    (tmp_path / "chaos-main.sql").write_text(f"\\set id random(1, 500)\nINSERT INTO \"{schema}\".a VALUES "
                                             "(:id, 'x') ON CONFLICT (id) DO UPDATE SET v = 'y';\n")
    load.scripts = [f"{tmp_path / 'chaos-main.sql'}@1"]
    load.start()
    try:
        run_step("cluster-upgrade/run", env)
        run_step("add-table/run", env)
        with db.cursor() as cur:
            cur.execute(f'UPDATE "{schema}".b SET v = \'new\' WHERE id <= 3')
        load.stop()
        relay.stop(signal.SIGKILL)  # the relay stalls; the queue grows
        with db.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}".a SELECT g, \'bulk\' FROM generate_series(1000, 6000) g')
        out = run_step("stalled/recover", env)
        assert '"pending_events": 0' in out, out
    finally:
        load.stop() if load._thread.is_alive() else None
        pid = int((tmp_path / "relay2.pid").read_text()) if (tmp_path / "relay2.pid").exists() else None
    caught_up(stack, cluster, "ops")
    wait_state(stack, cluster, "ops", "done")  # the added table's online snapshot, resumed by relay2
    reports = verify(stack, cluster, "ops")
    by_topic = {r.topic.rsplit(".", 1)[-1]: r for r in reports}
    assert by_topic["a"].ok, by_topic["a"].first_difference
    assert by_topic["b"].ok and by_topic["b"].rebuilt_rows == 10, by_topic["b"]  # its old rows too
    try:
        run_step("drop/run", env)
        assert "no replication set" in pgshovel(stack, cluster, "set", "inspect", "ops", check=False).stderr
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _rows(server, table: str) -> list[tuple]:
    return server.query(f"SELECT * FROM {table} ORDER BY 1")


def test_logical_set_rebootstrap_before_17(stack, cluster, pair, tmp_path):
    """PostgreSQL 15: the slot does not fail over; promote, repoint --rebootstrap, new slot and
    snapshot, consumer re-bootstrapped by copy: the target equals the new primary's table, though
    rows were deleted on the new primary while no slot existed."""
    primary, replica = pair
    target = PgServer("t1", extra_port(0))
    target.destroy()
    target.start()
    table = '"s1".acct'
    primary.query('CREATE SCHEMA "s1"')
    primary.query(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, s text)")
    primary.query(f"INSERT INTO {table} SELECT g, 0, 'x' FROM generate_series(1, 3000) g")
    cfg = write_config(tmp_path, proxy_stack(stack, primary), [{"schema": "s1", "name": "acct"}],
                       backend="logical", topic_prefix=f"rb{cluster}")
    pgshovel(stack, cluster, "set", "create", "rb", str(cfg))
    relay = RelayProcess(stack, cluster, "rb", log_path=tmp_path / "relay1.log")
    env = {**env_for(stack, cluster, primary, replica, "rb", tmp_path), "TARGET_DSN": target.dsn,
           "RELAY_LOG": str(tmp_path / "relay2.log"), "RELAY_PID": str(tmp_path / "relay2.pid")}
    try:
        relay.wait_for("snapshot done")
        assert "will not survive a failover: see docs/runbooks.rst (PostgreSQL 15)" in \
            pgshovel(stack, cluster, "set", "status", "rb").stdout
        subprocess.run([str(BIN / "pgshovel"), "replicate", "rb", "--target", target.dsn, "--bootstrap", "copy",
                        "--until-caught-up"], env=cli_env(stack, cluster), check=True, timeout=300)
        load = run_writers(primary.dsn, table)
        time.sleep(4)
        primary.kill()  # under load: the replica may lack the last transactions, the relay may have them
        stop_writers(*load)
        relay.stop(signal.SIGKILL)
        run_step("logical-rebootstrap/promote", env)
        refused = pgshovel(stack, cluster, "set", "repoint", "rb", "--dsn", replica.dsn, check=False)
        assert refused.returncode != 0 and "has no replication slot" in refused.stderr, refused.stderr
        run_step("logical-rebootstrap/repoint", env)
        replica.query(f"DELETE FROM {table} WHERE mod(id, 7) = 0")  # while no slot exists: not in Kafka
        replica.query(f"UPDATE {table} SET n = n + 100 WHERE mod(id, 5) = 0")
        run_step("logical-rebootstrap/relay", env)
        replica.query(f"DELETE FROM {table} WHERE mod(id, 11) = 0")
        replica.query(f"INSERT INTO {table} VALUES (900001, 1, 'after the new slot')")
        run_step("logical-rebootstrap/consumer", env)
        assert _rows(target, table) == _rows(replica, table)
        replica.query(f"UPDATE {table} SET s = 'later' WHERE mod(id, 3) = 0")  # the target keeps following
        caught_up(stack, cluster, "rb")
        subprocess.run([str(BIN / "pgshovel"), "replicate", "rb", "--target", target.dsn, "--until-caught-up"],
                       env=cli_env(stack, cluster), check=True, timeout=300)
        assert _rows(target, table) == _rows(replica, table)
        stale = [r for r in verify(stack, cluster, "rb") if not r.ok]
        print("set verify after the re-bootstrap (Kafka's history keeps rows deleted without a slot):", stale)
    finally:
        pid_file = tmp_path / "relay2.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
        target.destroy()


def test_relay_stopped_on_ddl(stack, cluster, db, schema, tmp_path, relay_factory):
    """The runbook 'Relay stopped on DDL': a numeric's scale changes, the relay waits; the steps
    show where, accept the change and see the set caught up, every row in Kafka."""
    from tests.integration.ddl_paths import assert_same, make_set, rebuild, source_rows, wait_stopped

    topics = make_set(stack, cluster, db, schema, tmp_path, "rbddl", "c",
                      {"t": "id int PRIMARY KEY, amount numeric(10,2)"})
    relay = relay_factory("rbddl")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, g FROM generate_series(1, 5) g')
        cur.execute(f'ALTER TABLE "{schema}".t ALTER COLUMN amount TYPE numeric(10,3)')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (6, 6.125)')
    wait_stopped(stack, cluster, "rbddl", relay)
    env = {**cli_env(stack, cluster), "SET": "rbddl", "TABLE": f"{schema}.t"}
    assert "STOPPED AT DDL" in run_step("ddl/inspect", env)
    run_step("ddl/accept", env)
    assert "accepted" in run_step("ddl/confirm", env)
    assert_same(rebuild(stack, [topics["t"]])[0], source_rows(db, f'"{schema}".t'))
    assert relay.stop() == 0


def test_relay_stopped_on_value(stack, cluster, db, schema, tmp_path, relay_factory):
    """The runbook 'A relay stopped on a value': a NaN in a numeric(10,2) column of an Avro set stops
    the relay (exit 1, the position and the skip command in its last line); the step skips exactly
    that change, a new relay relays the rest, and status records what was left out."""
    from tests.integration.ddl_paths import assert_same, make_set, rebuild, source_rows

    topics = make_set(stack, cluster, db, schema, tmp_path, "rbval", "c",
                      {"t": "id int PRIMARY KEY, amount numeric(10,2)"})
    relay = relay_factory("rbval")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, g FROM generate_series(1, 3) g')
        cur.execute(f"INSERT INTO \"{schema}\".t VALUES (4, 'NaN')")
        cur.execute(f'INSERT INTO "{schema}".t VALUES (5, 5.25)')
    assert relay.proc.wait(120) == 1, relay.log()
    error = relay.log().strip().splitlines()[-1]
    assert error.startswith("error: ") and "numeric value NaN has no Avro decimal form" in error, error
    position = re.search(r"set skip rbval --position (\S+)", error).group(1)
    env = {**cli_env(stack, cluster), "SET": "rbval", "POSITION": position,
           "RELAY_LOG": str(tmp_path / "relay2.log"), "RELAY_PID": str(tmp_path / "relay2.pid")}
    try:
        out = run_step("value/skip", env)
        assert f"skip {position}: left out: I of txid" in out, out
        assert "(recovered, the relay committed since)" in out, out
    finally:
        if (tmp_path / "relay2.pid").exists():
            os.kill(int((tmp_path / "relay2.pid").read_text()), signal.SIGKILL)
    rows = source_rows(db, f'"{schema}".t')
    del rows[(("id", 4),)]
    assert_same(rebuild(stack, [topics["t"]])[0], rows)
