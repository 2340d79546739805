"""The trigger backend on a database like a managed service's: a non-superuser role owning a
database without the pgq extension, PgQ installed from its PL-only build (``pgq: pl``), no
pgqd (the relay ticks its queue and runs PgQ's maintenance, which rotates the event tables).

Our C capture extension requires the pgq extension, so set create chooses the PL/pgSQL
capture (schema pgshovel2_pl) there by itself: nothing of ours is installed by a superuser.
"""

import time
import uuid

import psycopg2
import pytest
import yaml

from pgshovel2 import names
from pgshovel2.backends import pgq_ticker
from pgshovel2.cluster import ClusterStore
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config
from tests.pgservers import query as _query


@pytest.fixture
def owned_db(stack):
    """(dsn of a non-superuser role owning a fresh database without pgq, superuser dsn there)."""
    tag = uuid.uuid4().hex[:8]
    role, dbname = f"plo_{tag}", f"plodb_{tag}"
    su = psycopg2.connect(stack.dsn)
    su.autocommit = True
    with su.cursor() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN")
        cur.execute(f"CREATE DATABASE {dbname} OWNER {role}")
    su_dsn = stack.dsn.replace("dbname=pgshovel", f"dbname={dbname}")
    yield su_dsn.replace("user=postgres", f"user={role}"), su_dsn
    with su.cursor() as cur:
        cur.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
        cur.execute(f"DROP ROLE {role}")
    su.close()


@pytest.fixture
def no_pgqd(stack):
    """pgqd stopped for the test, started again after."""
    stack.script("stop", "pgqd")
    yield
    stack.script("start", "pgqd")




def _wait_messages(stack, topic: str, count: int, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        got = messages(stack, topic)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_pl_only_pgq_relays_without_pgqd(stack, cluster, owned_db, no_pgqd, tmp_path, relay_factory):
    dsn, su_dsn = owned_db
    _query(dsn, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    _query(dsn, "INSERT INTO t VALUES (1, 'before')")
    cfg = write_config(tmp_path, stack, ["t"], pgq="pl", topic_prefix=f"pl{cluster}")
    cfg.write_text(cfg.read_text().replace(stack.dsn, dsn))
    pgshovel(stack, cluster, "set", "create", "pl", str(cfg))

    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("pl")
    assert record.capture.pgq == "pl" and record.capture.kind == "plpgsql"
    assert _query(dsn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgq'") == [(0,)]
    assert _query(dsn, "SELECT pgq.version()") == [("3.5",)]
    assert not _query(dsn, "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")[0][0]
    queue = record.capture.queue
    _query(dsn, "SELECT pgq.set_queue_config(%s, 'rotation_period', '1 second')", (queue,))
    table_before = _query(dsn, "SELECT queue_cur_table FROM pgq.queue WHERE queue_name = %s", (queue,))[0][0]

    relay = relay_factory("pl", "--pgq-maint-interval", "0.5")
    relay.wait_for("snapshot done")
    topic = names.table_topic(f"pl{cluster}", "public", "t")
    for i in range(2, 12):  # several batches, over several rotation periods
        _query(dsn, "INSERT INTO t VALUES (%s, 'x')", (i,))
        time.sleep(0.3)
    # nothing forces a tick here: only the relay ticks (pgqd is stopped)
    got = _wait_messages(stack, topic, 11)
    assert sorted(k["id"] for k, _, _ in got) == list(range(1, 12))
    ticking = pgq_ticker.who_ticks(dsn, queue)
    assert ticking["ticker"] == "relay", ticking

    deadline = time.monotonic() + 30
    while _query(dsn, "SELECT queue_cur_table FROM pgq.queue WHERE queue_name = %s", (queue,))[0][0] \
            == table_before:
        assert time.monotonic() < deadline, f"the event tables never rotated:\n{relay.log()}"
        _query(dsn, "UPDATE t SET v = 'y' WHERE id = 1")
        time.sleep(0.5)
    assert "PgQ maintenance: pgq.maint_rotate_tables_step1" in relay.log()

    status = pgshovel(stack, cluster, "set", "status", "pl").stdout
    assert "ticks:" in status and "relay" in status, status
    caught_up(stack, cluster, "pl")
    assert_verified(verify(stack, cluster, "pl"))
    assert relay.stop() == 0
    pgshovel(stack, cluster, "set", "drop", "pl")
    assert _query(su_dsn, "SELECT count(*) FROM pgq.queue") == [(0,)]


def test_forced_extension_without_privilege_changes_nothing(stack, cluster, owned_db, tmp_path):
    dsn, _ = owned_db
    _query(dsn, "CREATE TABLE t (id int PRIMARY KEY)")
    cfg = write_config(tmp_path, stack, ["t"], pgq="extension")
    cfg.write_text(cfg.read_text().replace(stack.dsn, dsn))
    proc = pgshovel(stack, cluster, "set", "create", "ext", str(cfg), check=False)
    assert proc.returncode != 0 and "CREATE EXTENSION pgq failed" in proc.stderr, proc.stderr
    assert _query(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgq'") == [(0,)]
    assert "ext" not in pgshovel(stack, cluster, "set", "list", check=False).stdout.split()


def test_missing_privileges_named_at_once_then_printed_grants_suffice(stack, cluster, owned_db, tmp_path):
    dsn, su_dsn = owned_db
    role = dict(p.split("=") for p in dsn.split())["user"]
    for t in ("t1", "t2"):  # owned by the superuser: the set's role has no privilege on them
        _query(su_dsn, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    cfg = write_config(tmp_path, stack, ["t1", "t2"], pgq="pl")
    cfg.write_text(cfg.read_text().replace(stack.dsn, dsn))
    proc = pgshovel(stack, cluster, "set", "create", "g", str(cfg), check=False)
    assert proc.returncode != 0
    for what in ("SELECT on table public.t1", "TRIGGER on table public.t1", "SELECT on table public.t2",
                 "TRIGGER on table public.t2"):
        assert f"role {role} lacks {what}" in proc.stderr, proc.stderr
    assert "4 missing privilege(s)" in proc.stderr
    assert _query(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgq'") == [(0,)]

    grants = pgshovel(stack, cluster, "set", "create", "--print-grants", str(cfg)).stdout
    assert f'GRANT SELECT, TRIGGER ON TABLE "public"."t1" TO "{role}";' in grants, grants
    for line in grants.splitlines():
        if line.startswith("GRANT"):
            _query(su_dsn, line)
    pgshovel(stack, cluster, "set", "create", "g", str(cfg))
    with ClusterStore(stack.zk, cluster) as store:
        assert store.get_set("g")[0].capture.pgq == "pl"


def test_logical_set_names_every_missing_privilege_then_printed_grants_suffice(stack, cluster, owned_db,
                                                                              tmp_path):
    dsn, su_dsn = owned_db
    role = dict(p.split("=") for p in dsn.split())["user"]
    for t in ("t1", "t2"):  # owned by the superuser; the role has no REPLICATION attribute either
        _query(su_dsn, f"CREATE TABLE {t} (id int PRIMARY KEY, n int)")
    cfg = tmp_path / "logical.yaml"
    cfg.write_text(yaml.safe_dump({"database": {"dsn": dsn}, "backend": "logical", "decoder": "pgoutput",
                                   "encoding": "json", "topic_prefix": f"lg{cluster}", "tables": ["t1", "t2"]}))
    proc = pgshovel(stack, cluster, "set", "create", "lg", str(cfg), check=False)
    assert proc.returncode != 0
    for what in ("the REPLICATION attribute", "SELECT on table public.t1", "ownership of table public.t1",
                 "SELECT on table public.t2", "ownership of table public.t2",
                 "UPDATE (or DELETE, TRUNCATE; MAINTAIN on PostgreSQL 17+: set upgrade locks it against writers) "
                 "on table public.t1"):
        assert f"role {role} lacks {what}" in proc.stderr, proc.stderr
    assert "7 missing privilege(s)" in proc.stderr
    assert _query(su_dsn, "SELECT count(*) FROM pg_publication") == [(0,)]
    assert _query(su_dsn, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]

    # the set's own publication wants the tables' owner: given only when asked (--transfer-ownership)
    grants = pgshovel(stack, cluster, "set", "create", "--print-grants", str(cfg)).stdout
    assert not any("OWNER TO" in line for line in grants.splitlines() if not line.startswith("--"))
    grants = pgshovel(stack, cluster, "set", "create", "--print-grants", "--transfer-ownership", str(cfg)).stdout
    for line in grants.splitlines():
        if line and not line.startswith("--"):
            _query(su_dsn, line)
    pgshovel(stack, cluster, "set", "create", "lg", str(cfg))
    assert _query(su_dsn, "SELECT count(*) FROM pg_publication") == [(1,)]
    pgshovel(stack, cluster, "set", "drop", "lg")


def test_cluster_upgrade_brings_a_pl_only_pgq_to_this_hosts_version(stack, cluster, owned_db, tmp_path,
                                                                   relay_factory):
    dsn, su_dsn = owned_db
    _query(dsn, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    cfg = write_config(tmp_path, stack, ["t"], pgq="pl", topic_prefix=f"up{cluster}")
    cfg.write_text(cfg.read_text().replace(stack.dsn, dsn))
    pgshovel(stack, cluster, "set", "create", "up", str(cfg))
    (current,) = _query(dsn, "SELECT pgq.version()")[0]
    _query(dsn, "CREATE OR REPLACE FUNCTION pgq.version() RETURNS text LANGUAGE sql AS $$ SELECT '3.0'::text $$")
    out = pgshovel(stack, cluster, "cluster", "upgrade").stdout
    assert f"PgQ (PL-only) 3.0 -> {current}" in out, out
    assert _query(dsn, "SELECT pgq.version()") == [(current,)]
    again = pgshovel(stack, cluster, "cluster", "upgrade").stdout
    assert f"PgQ (PL-only) {current}" in again and "nothing to upgrade" in again, again
    relay = relay_factory("up")  # capture and the queue still work after the upgrade
    relay.wait_for("snapshot done")
    _query(dsn, "INSERT INTO t VALUES (1, 'after upgrade')")
    caught_up(stack, cluster, "up")
    assert_verified(verify(stack, cluster, "up"))
    assert [k["id"] for k, _v, _h in messages(stack, names.table_topic(f"up{cluster}", "public", "t"))] == [1]
