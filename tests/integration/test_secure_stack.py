"""The main flow with every service secured at once (issue #67): ZooKeeper requiring SASL over
mutual TLS with ACLs on every znode, Kafka over SASL_SSL with the relay's and the consumer's ACLs
only, the schema registry behind TLS, client certificates and basic auth, the set's DSN holding a
password reference. cluster initialize, set create, the relay's snapshot and stream exactly-once
across a kill -9, set status, tail, set verify and replicate, on both backends; no secret in any
znode, output or log."""

import json
import signal
import subprocess
import uuid
from collections import Counter

import pytest
import yaml

from pgshovel2.cluster import ClusterStore
from pgshovel2.ops import status
from pgshovel2.zkauth import ZooKeeperAuth
from tests.helpers import BIN, RelayProcess, cli_env
from tests.integration.test_secure_kafka import committed, consumer_env, consumer_settings, relay_env
from tests.secure import TOPIC_PREFIX

DB_SECRET = "db-s3cret-stack"
DB_PASSWORD_VAR = "PGSHOVEL_TEST_DB_PASSWORD"


class Secured:
    """The clients' environments of one test: admin (ZooKeeper only), relay and consumer."""

    def __init__(self, stack, cluster: str, zk, kafka, registry, tmp_path):
        self.stack, self.cluster, self.zk = stack, cluster, zk
        base = {**cli_env(stack, cluster), **zk.env(tls=True), DB_PASSWORD_VAR: DB_SECRET,
                "PGSHOVEL_BOOTSTRAP_SERVERS": "", "PGSHOVEL_SCHEMA_REGISTRY": ""}
        self.admin = base
        self.relay = {**base, **relay_env(kafka, registry, tmp_path)}
        self.consumer = {**base, **consumer_env(kafka, registry)}
        self.kafka = consumer_settings(kafka)

    def cli(self, env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(BIN / "pgshovel"), *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, f"pgshovel {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc

    def store(self) -> ClusterStore:
        auth = ZooKeeperAuth.build({"auth": self.zk.auth("admin"), "ca": str(self.zk.ca), "cert": str(self.zk.cert),
                                    "key": str(self.zk.key)}, "test")
        return ClusterStore(self.zk.tls_hosts, self.cluster, auth=auth)

    def caught_up(self, set_name: str) -> None:
        with self.store() as store:
            status.wait_caught_up(store, set_name, self.kafka, 120)


def _config(stack, tmp_path, schema: str, backend: str, prefix: str) -> str:
    path = tmp_path / f"set-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump({
        "database": {"dsn": f"{stack.dsn} password=env:{DB_PASSWORD_VAR}"}, "backend": backend,
        "encoding": "avro", "topic_prefix": prefix,
        "tables": [{"schema": schema, "name": "items"}]}))
    return str(path)


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_main_flow_on_the_secured_stack(stack, db, schema, tmp_path, secure_zookeeper, secure_kafka, secure_registry,
                                        target, backend, monkeypatch):
    monkeypatch.setenv(DB_PASSWORD_VAR, DB_SECRET)  # wait_caught_up reads the source here too
    cluster, set_name = f"s{uuid.uuid4().hex[:8]}", f"full{uuid.uuid4().hex[:6]}"
    sec = Secured(stack, cluster, secure_zookeeper, secure_kafka, secure_registry, tmp_path)
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".items (id int PRIMARY KEY, name text, amount numeric(10,2))')
        cur.execute(f"INSERT INTO \"{schema}\".items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 40) g")
    printed = [sec.cli(sec.admin, "cluster", "initialize"),
               sec.cli(sec.admin, "set", "create", set_name,
                       _config(stack, tmp_path, schema, backend, f"{TOPIC_PREFIX}-{cluster}"))]
    logs = [tmp_path / "relay-1.log", tmp_path / "relay-2.log"]
    relay = RelayProcess(stack, cluster, set_name, log_path=logs[0], extra_env=sec.relay)
    sec.caught_up(set_name)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".items SET amount = amount + 1 WHERE id <= 10')
        cur.execute(f'DELETE FROM "{schema}".items WHERE id > 35')
    relay.stop(signal.SIGKILL)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".items SELECT g, 'late', 2 FROM generate_series(100, 119) g")
    relay = RelayProcess(stack, cluster, set_name, log_path=logs[1], extra_env=sec.relay)
    sec.caught_up(set_name)
    assert relay.stop() == 0

    with sec.store() as store:
        record, _ = store.get_set(set_name)
    messages = committed(sec.kafka, record.topic(record.tables[0]))
    ops = Counter(dict(h)["pgshovel.op"] for _, _, h in messages)
    positions = [dict(h)["pgshovel.position"] for _, _, h in messages]
    assert len(positions) == len(set(positions)), "a message was written twice"
    assert ops == {"r": 40, "u": 10, "d": 5, "c": 20}, ops

    shown = json.loads(sec.cli(sec.consumer, "set", "status", set_name, "--json").stdout)
    assert shown["position"] is not None and "error" not in shown["kafka"], shown
    tail = sec.cli(sec.consumer, "tail", set_name, "--from-beginning", "--format", "json")
    assert len(tail.stdout.splitlines()) == len(messages)
    printed += [tail, sec.cli(sec.consumer, "set", "verify", set_name, "--no-wait"),
                sec.cli(sec.consumer, "replicate", set_name, "--target", target.dsn, "--until-caught-up")]
    with db.cursor() as cur:
        cur.execute(f'SELECT * FROM "{schema}".items ORDER BY id')
        source = cur.fetchall()
    with target.connect().cursor() as cur:
        cur.execute(f'SELECT * FROM "{schema}".items ORDER BY id')
        assert cur.fetchall() == source

    secrets = [DB_SECRET, secure_kafka.password("pgshovel-relay"), secure_kafka.password("pgshovel-consumer"),
               secure_registry.password, secure_zookeeper.password_file("admin").read_text().strip()]
    with sec.store() as store:
        znodes = _all_data(store)
    shown_text = "".join(p.stdout + p.stderr for p in printed) + "".join(p.read_text() for p in logs) + znodes
    assert not [s for s in secrets if s in shown_text]


def _all_data(store: ClusterStore) -> str:
    """Every znode's data under the cluster, as text."""
    out, todo = [], [store.path]
    while todo:
        path = todo.pop()
        data, _ = store.zk.get(path)
        out.append(data.decode("utf-8", "replace"))
        todo += [f"{path}/{c}" for c in store.zk.get_children(path)]
    return "\n".join(out)
