"""Set create/upgrade/drop on a server without prepared transactions
(``max_prepared_transactions = 0``, as managed services): the admin command commits the
database first and records its ZooKeeper step in its intent; killed at each step,
``cluster recover`` completes it (database committed) or drops the intent (it did not), and
ZooKeeper and the database agree again."""

import pytest

from pgshovel2.cluster import ClusterStore
from tests.helpers import pgshovel, write_config
from tests.integration.test_lifecycle import STEPS, _run_killed, assert_agree, capture_state, zk_state
from tests.pgservers import PgServer, extra_port


@pytest.fixture(scope="module")
def no2pc(stack):
    server = PgServer("no2pc", extra_port(5), settings={"max_prepared_transactions": "0"}).start()
    yield server
    server.destroy()


@pytest.fixture
def tables(no2pc):
    conn = no2pc.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")  # so capture_state can read pgq.queue from the start
        cur.execute("DROP TABLE IF EXISTS a, b")
        cur.execute("CREATE TABLE a (id int PRIMARY KEY, v text, w int)")
        cur.execute("CREATE TABLE b (id int PRIMARY KEY, x text)")
    yield conn
    conn.close()


def _config(tmp_path, stack, server, tables):
    path = write_config(tmp_path, stack, tables)
    path.write_text(path.read_text().replace(stack.dsn, server.dsn))
    return path


def test_server_has_no_prepared_transactions(no2pc):
    assert no2pc.query("SHOW max_prepared_transactions") == [("0",)]


@pytest.mark.parametrize("failpoint, _", STEPS)
@pytest.mark.parametrize("action", ["create", "upgrade", "drop"])
def test_admin_killed_at_each_step_then_recover(stack, cluster, no2pc, tables, tmp_path, action, failpoint, _):
    db = tables
    applied = failpoint != "admin_before_prepare"  # the database commits first: recover rolls forward
    v1 = _config(tmp_path, stack, no2pc, [{"name": "a", "columns": ["v"]}])
    v2 = _config(tmp_path, stack, no2pc, ["a", "b"])
    if action != "create":
        pgshovel(stack, cluster, "set", "create", "k", str(v1))
    before = zk_state(stack, cluster, "k")
    args = {"create": ("set", "create", "k", str(v1)), "upgrade": ("set", "upgrade", "k", str(v2)),
            "drop": ("set", "drop", "k")}[action]
    _run_killed(stack, cluster, failpoint, *args)
    assert capture_state(db, cluster, "k", "public")["prepared"] == []
    with ClusterStore(stack.zk, cluster) as store:
        assert store.intents(), "the kill left no intent"
    if action != "drop":
        blocked = pgshovel(stack, cluster, "set", "drop" if action == "upgrade" else "create", "k",
                           *([] if action == "upgrade" else [str(v1)]), check=False)
        assert blocked.returncode != 0
    out = pgshovel(stack, cluster, "cluster", "recover").stdout
    verb = "completed" if applied else "removed the intent"
    assert verb in out and action in out, out
    after = assert_agree(stack, db, cluster, "k", "public")
    expected_version = {"create": 1, "upgrade": 2, "drop": None}[action] if applied else (before or {}).get("version")
    assert (after or {}).get("version") == expected_version
    assert "nothing to recover" in pgshovel(stack, cluster, "cluster", "recover").stdout
    if after is not None:
        pgshovel(stack, cluster, "set", "drop", "k")
        assert assert_agree(stack, db, cluster, "k", "public") is None
