"""The main flow with every service secured at once (issue #67): ZooKeeper requiring SASL over
mutual TLS with ACLs on every znode, Kafka over SASL_SSL with the relay's and the consumer's ACLs
only, the schema registry behind TLS, client certificates and basic auth, PostgreSQL with TLS
(verify-full) and scram-sha-256 only, the set created by the admin role and relayed by the relay
role with only what --print-grants printed (the application owns its tables). cluster initialize,
set create, the relay's snapshot and stream exactly-once across a kill -9, set status, tail, set
verify and replicate, on both backends; no secret in any znode, output or log."""

import json
import signal
import subprocess
import uuid
from collections import Counter

import pyarrow.parquet as pq
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.ops import status
from pgshovel2.sparkjobs import bootstrap, materialize
from pgshovel2.zkauth import ZooKeeperAuth
from tests.helpers import BIN, RelayProcess, cli_env
from tests.integration.test_secure_kafka import committed, consumer_env, consumer_settings, relay_env
from tests.integration.test_secure_postgres import Secure, _table
from tests.integration.test_secure_zookeeper import _znodes
from tests.secure import TOPIC_PREFIX


class Secured:
    """The clients' environments of one test: admin (ZooKeeper only), relay and consumer."""

    def __init__(self, stack, cluster: str, zk, kafka, registry, tmp_path):
        self.stack, self.cluster, self.zk = stack, cluster, zk
        base = {**cli_env(stack, cluster), **zk.env(tls=True), "PGSHOVEL_BOOTSTRAP_SERVERS": "",
                "PGSHOVEL_SCHEMA_REGISTRY": ""}
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


def _config(pg: Secure, backend: str, prefix: str) -> str:
    """The set config: the admin role's DSN, the relay role's keywords over it (tests/secure.py)."""
    return pg.config("full", "", ["items"], backend=backend, encoding="avro", topic_prefix=prefix)


def _grant(sec: Secured, pg: Secure, config: str) -> None:
    """The DBA runs every statement set create --print-grants prints for config, and nothing else."""
    grants = sec.cli(sec.admin, "set", "create", "--print-grants", config).stdout
    pg.dba("\n".join(line for line in grants.splitlines() if line and not line.startswith("--")))


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_main_flow_on_the_secured_stack(stack, tmp_path, secure_zookeeper, secure_kafka, secure_registry,
                                        secure_postgres, secure_db, target, backend):
    cluster, set_name = f"s{uuid.uuid4().hex[:8]}", f"full{uuid.uuid4().hex[:6]}"
    sec = Secured(stack, cluster, secure_zookeeper, secure_kafka, secure_registry, tmp_path)
    pg = Secure(secure_postgres, secure_db, tmp_path)
    _table(pg, "items", 40)
    config = _config(pg, backend, f"{TOPIC_PREFIX}-{cluster}")
    _grant(sec, pg, config)
    printed = [sec.cli(sec.admin, "cluster", "initialize"), sec.cli(sec.admin, "set", "create", set_name, config)]
    logs = [tmp_path / "relay-1.log", tmp_path / "relay-2.log"]
    relay = RelayProcess(stack, cluster, set_name, log_path=logs[0], extra_env=sec.relay)
    sec.caught_up(set_name)
    pg.as_app("UPDATE public.items SET v = v || '!' WHERE id <= 10; DELETE FROM public.items WHERE id > 35")
    relay.stop(signal.SIGKILL)
    pg.as_app("INSERT INTO public.items SELECT g, 'late' FROM generate_series(100, 119) g")
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
    source = pg.dba("SELECT * FROM public.items ORDER BY id")
    with target.connect().cursor() as cur:
        cur.execute("SELECT * FROM public.items ORDER BY id")
        assert cur.fetchall() == source

    secrets = [secure_postgres.password("pgshovel_admin"), secure_postgres.password("pgshovel_relay"),
               secure_kafka.password("pgshovel-relay"), secure_kafka.password("pgshovel-consumer"),
               secure_registry.password, secure_zookeeper.password_file("admin").read_text().strip()]
    with sec.store() as store:
        znodes = "\n".join(data.decode("utf-8", "replace") for data, _ in _znodes(store).values())
    shown_text = "".join(p.stdout + p.stderr for p in printed) + "".join(p.read_text() for p in logs) + znodes
    assert not [s for s in secrets if s in shown_text]



def test_spark_bootstrap_and_materialize_on_the_secured_stack(stack, tmp_path, spark, secure_zookeeper, secure_kafka,
                                                              secure_registry, secure_postgres, secure_db):
    """The Spark bootstrap (JDBC over TLS as the set's role, the handoff read through ZooKeeper over
    TLS + SASL and Kafka over SASL_SSL) and materialize (Kafka source over SASL_SSL, Avro through the
    secured registry) rebuild the table the application changed after the bootstrap."""
    cluster, set_name = f"s{uuid.uuid4().hex[:8]}", f"spark{uuid.uuid4().hex[:6]}"
    sec = Secured(stack, cluster, secure_zookeeper, secure_kafka, secure_registry, tmp_path)
    pg = Secure(secure_postgres, secure_db, tmp_path)
    _table(pg, "items", 300)
    config = _config(pg, "trigger", f"{TOPIC_PREFIX}-{cluster}")
    _grant(sec, pg, config)
    sec.cli(sec.admin, "cluster", "initialize")
    sec.cli(sec.admin, "set", "create", set_name, config)
    relay = RelayProcess(stack, cluster, set_name, log_path=tmp_path / "relay.log", extra_env=sec.relay)
    sec.caught_up(set_name)
    registry, boot, out = secure_registry.settings(), tmp_path / "boot", tmp_path / "state"
    with sec.store() as store:
        bootstrap.run(spark, store, set_name, bootstrap.BootstrapOptions(str(boot), sec.kafka, registry))
    pg.as_app("UPDATE public.items SET v = v || '!' WHERE id % 7 = 0; DELETE FROM public.items WHERE id > 280; "
              "INSERT INTO public.items VALUES (1000, 'after the bootstrap')")
    sec.caught_up(set_name)
    assert relay.stop() == 0
    materialize.run(spark, materialize.MaterializeOptions(str(boot), str(out), sec.kafka, registry))
    rows = pq.read_table(str(materialize.current_state(out) / "tables" / bootstrap.table_dir("public", "items")),
                         columns=["id", "v"]).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == sorted(pg.dba("SELECT id, v FROM public.items"))
