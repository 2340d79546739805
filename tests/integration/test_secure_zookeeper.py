"""Secured ZooKeeper (#67 items 3, 4): the admin CLI and relays against a ZooKeeper that requires
SASL DIGEST-MD5 on every connection (and over its mutual-TLS port), with the test stack's PostgreSQL
and Kafka. Every znode pgshovel2 creates -- the election's lock nodes included -- has the admin
principal alone in its ACL; another principal can neither read nor change a set; a wrong password
is a clear error that writes nothing; no znode, output or relay log holds the database password
(the set's DSN refers to it: password=env:VAR)."""

import signal
import subprocess
import uuid

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from pgshovel2 import names
from pgshovel2.cluster import ROOT, ClusterStore
from pgshovel2.errors import ClusterError
from pgshovel2.ops.verify import read_topics
from pgshovel2.zkauth import ZooKeeperAuth, acl_text
from tests.helpers import BIN, RelayProcess, cli_env
from tests.secure import zookeeper_chroot

SECRET = "db-s3cret-67"
PASSWORD_VAR = "PGSHOVEL_TEST_DB_PASSWORD"
ADMIN_ACL = ["sasl:admin:cdrwa"]


def _env(stack, cluster: str, zk, tls: bool, user: str = "admin") -> dict:
    return {**cli_env(stack, cluster), **zk.env(tls, user), PASSWORD_VAR: SECRET}


def _cli(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / "pgshovel"), *args], env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"pgshovel {' '.join(args)} failed: {proc.stderr}")
    return proc


def _admin(zk, cluster: str) -> ClusterStore:
    return ClusterStore(zk.hosts, cluster, auth=ZooKeeperAuth.build({"auth": zk.auth("admin")}, "test"))


def _znodes(store: ClusterStore) -> dict[str, tuple[bytes, list[str]]]:
    """path -> (data, ACL entries) of every znode of the cluster, and of /pgshovel2."""
    out, todo = {}, [ROOT]
    while todo:
        path = todo.pop()
        data, _ = store.zk.get(path)
        out[path] = (data, sorted(acl_text(a) for a in store.zk.get_acls(path)[0]))
        todo += [f"{path}/{c}" for c in store.zk.get_children(path)
                 if path != ROOT or c == store.cluster]
    return out


def _intruder(zk) -> KazooClient:
    password = zk.password_file("intruder").read_text().strip()
    client = KazooClient(hosts=zk.hosts, timeout=5,
                         sasl_options={"mechanism": "DIGEST-MD5", "username": "intruder", "password": password})
    client.start(timeout=15)
    return client


def _config(stack, tmp_path, schema: str, tables: list[str]) -> str:
    path = tmp_path / f"set-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump({"database": {"dsn": f"{stack.dsn} password=env:{PASSWORD_VAR}"},
                                    "encoding": "json", "tables": [{"schema": schema, "name": t} for t in tables]}))
    return str(path)


def _capture_triggers(db, schema: str) -> int:
    """How many capture triggers the tables of schema have (0: no set was installed there)."""
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = %s AND NOT t.tgisinternal", (schema,))
        return cur.fetchone()[0]


def _wait_active(relay: RelayProcess, timeout: float = 60) -> None:
    relay.wait_for("active relay of set", timeout)


def _rows(stack, topic: str) -> int:
    return len(read_topics(stack.bootstrap, [topic])[topic])


@pytest.mark.parametrize("tls", [False, True], ids=["sasl", "tls"])
def test_set_lifecycle_relay_election_and_failover(stack, db, schema, tmp_path, secure_zookeeper, tls):
    zk, cluster, name = secure_zookeeper, f"s{uuid.uuid4().hex[:8]}", f"sec{uuid.uuid4().hex[:6]}"
    env = _env(stack, cluster, zk, tls)
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".u (id int PRIMARY KEY)')
    config = _config(stack, tmp_path, schema, ["t"])
    printed = [_cli(env, "cluster", "initialize"), _cli(env, "set", "create", name, config)]
    relays = [RelayProcess(stack, cluster, name, log_path=tmp_path / "relay1.log", extra_env=env)]
    _wait_active(relays[0])
    relays.append(RelayProcess(stack, cluster, name, log_path=tmp_path / "relay2.log", extra_env=env))
    relays[1].wait_for("standing by")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, \'a\' FROM generate_series(1, 20) g')
    printed.append(_cli(env, "set", "status", name, "--wait"))
    topic = names.table_topic(name, schema, "t")
    assert _rows(stack, topic) == 20

    with _admin(zk, cluster) as store:  # two contenders: the election's lock nodes exist now
        nodes = _znodes(store)
    election = [p for p in nodes if "/relay/election/" in p]
    assert len(election) == 2, sorted(nodes)
    assert {p: acl for p, (_, acl) in nodes.items() if acl != ADMIN_ACL} == {}
    _assert_intruder_refused(zk, f"{ROOT}/{cluster}/sets/{name}")

    relays[0].stop(signal.SIGKILL)  # failover: the standby takes over after the session timeout
    _wait_active(relays[1])
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, \'b\' FROM generate_series(21, 30) g')
    printed.append(_cli(env, "set", "status", name, "--wait"))
    assert _rows(stack, topic) == 30
    printed += [_cli(env, "set", "upgrade", name, _config(stack, tmp_path, schema, ["t", "u"])),
                _cli(env, "set", "inspect", name, "--json"), _cli(env, "set", "inspect", name),
                _cli(env, "set", "status", name, "--json"), _cli(env, "cluster", "inspect")]
    assert f"acl: {ADMIN_ACL[0]} (every znode)" in printed[-1].stdout
    assert f"password=env:{PASSWORD_VAR}" in printed[-4].stdout  # the reference is what is stored and shown

    with _admin(zk, cluster) as store:
        nodes = _znodes(store)
    assert not [p for p, (data, _) in nodes.items() if SECRET.encode() in data]
    assert {p: acl for p, (_, acl) in nodes.items() if acl != ADMIN_ACL} == {}

    anonymous = {**env}
    anonymous.pop("PGSHOVEL_ZOOKEEPER_AUTH")
    refused = _cli(anonymous, "set", "inspect", name, check=False)
    assert refused.returncode == 1 and "requires authentication" in refused.stderr, refused.stderr

    printed.append(_cli(env, "set", "drop", name))
    for relay in relays:
        relay.stop(signal.SIGKILL)
    output = "".join(p.stdout + p.stderr for p in printed) + "".join(r.log() for r in relays)
    assert SECRET not in output


def _assert_intruder_refused(zk, set_path: str) -> None:
    """Another authenticated principal gets NoAuth reading, changing, deleting or adding under the set."""
    client = _intruder(zk)
    try:
        for attempt in (lambda: client.get(set_path), lambda: client.set(set_path, b"{}"),
                        lambda: client.delete(set_path, recursive=False),
                        lambda: client.create(f"{set_path}/relay/x", b""),
                        lambda: client.get(f"{set_path}/history/0000000001")):
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        client.stop()
        client.close()


def test_wrong_password_is_a_clear_error_and_writes_nothing(stack, db, schema, tmp_path, secure_zookeeper):
    zk, cluster = secure_zookeeper, f"s{uuid.uuid4().hex[:8]}"
    env = _env(stack, cluster, zk, False)
    _cli(env, "cluster", "initialize")
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY)')
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    config = _config(stack, tmp_path, schema, ["t"])
    with _admin(zk, cluster) as store:
        before = _znodes(store)
    for tls in (False, True):
        proc = _cli({**_env(stack, cluster, zk, tls), "PGSHOVEL_ZOOKEEPER_AUTH": f"sasl:admin:file:{wrong}"},
                    "set", "create", "x", config, check=False)
        hosts = zk.tls_hosts if tls else zk.hosts
        assert proc.returncode == 1
        assert (f"error: ZooKeeper at {hosts} did not accept the SASL DIGEST-MD5 login of user 'admin'"
                in proc.stderr), proc.stderr
        assert "not-the-password" not in proc.stdout + proc.stderr
    with _admin(zk, cluster) as store:
        assert _znodes(store) == before
    assert _capture_triggers(db, schema) == 0


def test_digest_acl_refuses_clients_without_the_password(stack, tmp_path, monkeypatch):
    """ZooKeeper's digest scheme needs no server setup: on the test stack's open ZooKeeper a client
    without credentials connects, and the ACL alone refuses it the cluster (NoAuth)."""
    cluster, hosts = f"d{uuid.uuid4().hex[:8]}", zookeeper_chroot(stack.zk)
    monkeypatch.setenv("ZK_DIGEST_PW", "digest-pw-67")
    env = {**cli_env(stack, cluster), "PGSHOVEL_ZOOKEEPER_HOSTS": hosts,
           "PGSHOVEL_ZOOKEEPER_AUTH": "digest:pgshovel:env:ZK_DIGEST_PW"}
    _cli(env, "cluster", "initialize")
    shown = _cli(env, "cluster", "inspect").stdout
    assert "acl: digest:pgshovel:" in shown and ":cdrwa (every znode)" in shown
    with pytest.raises(ClusterError, match=f"refuses no authentication access to /pgshovel2/{cluster} .NoAuth"):
        ClusterStore(hosts, cluster).__enter__()
    with pytest.raises(ClusterError, match="refuses no authentication access to /pgshovel2 .NoAuth"):
        ClusterStore(hosts, "another").__enter__()  # /pgshovel2 itself: nobody else creates a cluster there
    anonymous = KazooClient(hosts=hosts)
    anonymous.start(timeout=15)
    try:
        with pytest.raises(NoAuthError):
            anonymous.get(f"{ROOT}/{cluster}/sets")
        with pytest.raises(NoAuthError):
            anonymous.create(f"{ROOT}/{cluster}/sets/x", b"{}")
    finally:
        anonymous.stop()
        anonymous.close()
    wrong = _cli({**env, "ZK_DIGEST_PW": "nope"}, "set", "list", check=False)
    assert wrong.returncode == 1
    assert (f"refuses digest authentication as 'pgshovel' access to /pgshovel2/{cluster} (NoAuth): wrong password"
            in wrong.stderr), wrong.stderr


def test_set_create_refuses_a_password_in_the_config(stack, cluster, db, schema, tmp_path):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY)')
    host, port = "127.0.0.1", stack.env["PG_PORT"]
    for dsn in (f"{stack.dsn} password={SECRET}", f"postgresql://postgres:{SECRET}@{host}:{port}/pgshovel",
                f"{stack.dsn} sslpassword={SECRET}"):
        path = tmp_path / "set.yaml"
        path.write_text(yaml.safe_dump({"database": {"dsn": dsn}, "tables": [{"schema": schema, "name": "t"}]}))
        proc = _cli(cli_env(stack, cluster), "set", "create", "withpw", str(path), check=False)
        assert proc.returncode == 1, proc.stdout
        assert f"error: {path}: database.dsn: holds its " in proc.stderr and "password=env:VAR" in proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    with ClusterStore(stack.zk, cluster) as store:
        assert store.list_sets() == [] and store.intents() == {}
    assert _capture_triggers(db, schema) == 0
