"""No secret at rest in ZooKeeper (#67 item 4): a cluster made by an earlier version, whose set
record, history and an unfinished command's intent hold the database password (and sslpassword),
is shown without them by every reader (set inspect, set status, cluster inspect; relay logs), and
``cluster upgrade`` takes them out of every znode and closes the ACLs (digest principal); the set
keeps working. set repoint refuses a DSN holding a password."""

import json
import subprocess
import uuid

import yaml

from pgshovel2 import names
from pgshovel2.cluster import ROOT, ClusterStore
from pgshovel2.errors import ClusterError
from pgshovel2.ops.verify import read_topics
from pgshovel2.zkauth import ZooKeeperAuth, acl_text
from tests.helpers import BIN, RelayProcess, cli_env
from tests.secure import zookeeper_chroot

SECRET, SSL_SECRET = "pw-at-rest-67", "keypw-at-rest-67"


def _cli(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / "pgshovel"), *args], env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"pgshovel {' '.join(args)} failed: {proc.stderr}")
    return proc


def _as_older_versions_stored_it(hosts: str, cluster: str, name: str, dsn: str) -> None:
    """Put dsn (with its passwords) into the set's record, its history and an intent, as versions
    before this one stored them."""
    with ClusterStore(hosts, cluster) as store:
        for path in (store.set_path(name), f"{store.set_path(name)}/history/0000000001"):
            data, stat = store.zk.get(path)
            record = json.loads(data)
            record["config"]["dsn"] = dsn
            store.zk.set(path, json.dumps(record, sort_keys=True).encode(), version=stat.version)
        store.record_intent(f"pgshovel2:{cluster}:{name}:upgrade:2:feedface", dsn)


def _rows(stack, topic: str) -> int:
    return len(read_topics(stack.bootstrap, [topic])[topic])


def test_cluster_upgrade_takes_passwords_out_of_zookeeper(stack, db, schema, tmp_path, monkeypatch):
    cluster, name, hosts = f"r{uuid.uuid4().hex[:8]}", f"rest{uuid.uuid4().hex[:6]}", zookeeper_chroot(stack.zk)
    env = {**cli_env(stack, cluster), "PGSHOVEL_ZOOKEEPER_HOSTS": hosts}
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY)')
    config = tmp_path / "set.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": stack.dsn}, "encoding": "json",
                                      "tables": [{"schema": schema, "name": "t"}]}))
    printed = [_cli(env, "cluster", "initialize"), _cli(env, "set", "create", name, str(config))]
    _as_older_versions_stored_it(hosts, cluster, name, f"{stack.dsn} password={SECRET} sslpassword={SSL_SECRET}")

    relay = RelayProcess(stack, cluster, name, log_path=tmp_path / "before.log", extra_env=env)
    relay.wait_for("active relay of set")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT generate_series(1, 10)')
    printed += [_cli(env, "set", "status", name, "--wait"), _cli(env, "set", "status", name, "--json"),
                _cli(env, "set", "inspect", name, "--json"), _cli(env, "cluster", "inspect", "--json"),
                _cli(env, "set", "inspect", name, "--version", "1", "--json")]
    relay.stop()
    _assert_no_secret(printed, relay.log())  # every reader of the older records
    repoint = _cli(env, "set", "repoint", name, "--dsn", f"{stack.dsn} password={SECRET}", check=False)
    assert repoint.returncode == 1 and "set repoint --dsn: dsn: holds its password itself" in repoint.stderr
    printed.append(repoint)

    monkeypatch.setenv("ZK_DIGEST_PW", "digest-pw-67")
    secured = {**env, "PGSHOVEL_ZOOKEEPER_AUTH": "digest:admin:env:ZK_DIGEST_PW", "ZK_DIGEST_PW": "digest-pw-67"}
    upgrade = _cli(secured, "cluster", "upgrade")
    printed.append(upgrade)
    assert "secrets at rest: removed the password from 3 znode(s)" in upgrade.stdout, upgrade.stdout
    assert "ZooKeeper ACLs: digest:admin:" in upgrade.stdout

    admin = ZooKeeperAuth.build({"auth": "digest:admin:env:ZK_DIGEST_PW"}, "test")
    with ClusterStore(hosts, cluster, auth=admin) as store:
        paths, todo = [], [ROOT]
        while todo:
            path = todo.pop()
            paths.append(path)
            todo += [f"{path}/{c}" for c in store.zk.get_children(path)]
        for path in paths:
            data = store.zk.get(path)[0]
            assert SECRET.encode() not in data and SSL_SECRET.encode() not in data, path
            assert [acl_text(a) for a in store.zk.get_acls(path)[0]] == [acl_text(a) for a in admin.acl()], path
        record, _ = store.get_set(name)
        assert record.dsn == stack.dsn
    try:
        ClusterStore(hosts, cluster).__enter__()
        raise AssertionError("a client without the digest password entered the cluster")
    except ClusterError as exc:
        assert "(NoAuth)" in str(exc)

    relay = RelayProcess(stack, cluster, name, log_path=tmp_path / "after.log", extra_env=secured)
    relay.wait_for("active relay of set")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT generate_series(11, 15)')
    printed.append(_cli(secured, "set", "status", name, "--wait"))
    relay.stop()
    assert _rows(stack, names.table_topic(name, schema, "t")) == 15
    _assert_no_secret(printed, (tmp_path / "before.log").read_text() + relay.log())


def _assert_no_secret(printed: list[subprocess.CompletedProcess], logs: str) -> None:
    output = "".join(p.stdout + p.stderr for p in printed) + logs
    for secret in (SECRET, SSL_SECRET):
        assert secret not in output, output[max(0, output.find(secret) - 300):output.find(secret) + 50]
