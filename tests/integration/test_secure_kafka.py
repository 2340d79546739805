"""The main flow against a secured Kafka and schema registry (issue #67 items 1, 2, 8): a set on the
test stack's PostgreSQL, its relay writing exactly-once to Kafka over SASL_SSL (SCRAM-SHA-512) as a
user with only its ACLs (tests/secure.py, scripts/secure/kafka.sh), Avro through the registry
behind TLS, client certificates and basic auth, and set status, tail, set verify and replicate
reading it as the consumer user; the relay's metrics over HTTPS with basic auth. The settings
come the ways users give them: a client-properties file with file: references (the relay), the
PGSHOVEL_KAFKA_* variables with env: references (the consumers), user info in the registry URL."""

import json
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from base64 import b64encode

import pytest

from pgshovel2 import kafkaconf
from pgshovel2.cluster import ClusterStore
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.ops import status
from tests.helpers import BIN, RelayProcess, cli_env, pgshovel, write_config
from tests.secure import CONSUMER, RELAY, TOPIC_PREFIX


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def consumer_env(secure_kafka, secure_registry, **extra) -> dict:
    """The consumer user's settings as PGSHOVEL_KAFKA_* variables (its password an env: reference)."""
    return {"PGSHOVEL_BOOTSTRAP_SERVERS": secure_kafka.bootstrap, "PGSHOVEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "PGSHOVEL_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-512", "PGSHOVEL_KAFKA_SASL_USERNAME": CONSUMER,
            "PGSHOVEL_KAFKA_SASL_PASSWORD": "env:CONSUMER_KAFKA_PASSWORD",
            "CONSUMER_KAFKA_PASSWORD": secure_kafka.password(CONSUMER),
            "PGSHOVEL_KAFKA_SSL_CA_LOCATION": secure_kafka.ca, **secure_registry.env(), **extra}


def run(stack, cluster: str, env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """pgshovel args with env over the test CLI environment."""
    return subprocess.run([str(BIN / "pgshovel"), *args], env={**cli_env(stack, cluster), **env},
                          capture_output=True, text=True, timeout=timeout)


def consumer_settings(secure_kafka) -> KafkaSettings:
    return KafkaSettings.load(secure_kafka.bootstrap, environ={
        "PGSHOVEL_KAFKA_" + k.upper().replace(".", "_"): v for k, v in secure_kafka.properties(CONSUMER).items()})


def committed(kafka: KafkaSettings, topic: str) -> list[tuple]:
    """[(key, value, headers)] of every committed message of topic, read as kafka's user."""
    from pgshovel2.ops.verify import read_topics

    return read_topics(kafka, [topic], timeout=60)[topic]


def make_set(stack, cluster, db, schema, tmp_path, name: str, rows: int = 50) -> str:
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".items (id int PRIMARY KEY, name text, amount numeric(10,2))')
        cur.execute(f"INSERT INTO \"{schema}\".items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, {rows}) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "items"}], encoding="avro",
                       topic_prefix=f"{TOPIC_PREFIX}-{name}-{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    return name


def start_relay(stack, cluster, set_name, tmp_path, env: dict, *args: str) -> RelayProcess:
    return RelayProcess(stack, cluster, set_name, *args, log_path=tmp_path / f"relay-{uuid.uuid4().hex[:6]}.log",
                        extra_env=env)


def relay_env(secure_kafka, secure_registry, tmp_path, user: str = RELAY, **props) -> dict:
    """The relay's settings: a properties file (its password a file: reference) and the registry's variables."""
    path = secure_kafka.write_properties(tmp_path / f"{user}-{uuid.uuid4().hex[:6]}.properties",
                                         {**secure_kafka.properties(user), **props})
    return {"PGSHOVEL_KAFKA_CONFIG": str(path), "PGSHOVEL_BOOTSTRAP_SERVERS": "", **secure_registry.env()}


def wait_caught_up(stack, cluster, set_name, kafka: KafkaSettings, timeout: float = 90) -> None:
    with ClusterStore(stack.zk, cluster) as store:
        status.wait_caught_up(store, set_name, kafka, timeout)


def scrape(port: int, ca: str, user_info: str | None) -> tuple[int, str]:
    """(HTTP status, body) of https://127.0.0.1:port/metrics, with basic auth user_info if given."""
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if user_info:
        request.add_header("Authorization", "Basic " + b64encode(user_info.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=ssl.create_default_context(cafile=ca)) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_main_flow_on_secured_kafka_and_registry(stack, cluster, db, schema, tmp_path, secure_kafka, secure_registry,
                                                 producer_kind, target):
    """Snapshot + stream exactly-once through SASL_SSL with ACLs, Avro through the TLS + basic-auth
    registry, across a kill -9 of the relay; status, tail, verify and replicate as the consumer."""
    set_name = make_set(stack, cluster, db, schema, tmp_path, "eo")
    port, metrics_user = _free_port(), "prometheus:metrics-secret"
    env = {**relay_env(secure_kafka, secure_registry, tmp_path), "METRICS_AUTH": metrics_user}
    metrics = ("--metrics-port", str(port), "--metrics-tls-cert", str(secure_kafka.certs / "server.pem"),
               "--metrics-tls-key", str(secure_kafka.certs / "server.key"), "--metrics-basic-auth", "env:METRICS_AUTH")
    relay = start_relay(stack, cluster, set_name, tmp_path, env, *metrics)
    consumer = consumer_settings(secure_kafka)
    wait_caught_up(stack, cluster, set_name, consumer)
    assert ("Kafka producer: native" in relay.log()) == (producer_kind == "native"), relay.log()
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".items SET amount = amount + 1 WHERE id <= 10')
        cur.execute(f'DELETE FROM "{schema}".items WHERE id > 45')
        cur.execute(f"INSERT INTO \"{schema}\".items VALUES (100, 'new', 1)")
    wait_caught_up(stack, cluster, set_name, consumer)

    code, body = scrape(port, secure_kafka.ca, metrics_user)
    assert code == 200 and "pgshovel2_relay_changes_total" in body
    assert scrape(port, secure_kafka.ca, None)[0] == 401
    assert scrape(port, secure_kafka.ca, "prometheus:wrong")[0] == 401

    relay.stop(signal.SIGKILL)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".items SELECT g, 'late', 2 FROM generate_series(200, 219) g")
    relay = start_relay(stack, cluster, set_name, tmp_path, env)
    wait_caught_up(stack, cluster, set_name, consumer)
    relay.stop()
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    messages = committed(consumer, record.topic(record.tables[0]))
    positions = [dict(h)["pgshovel.position"] for _, _, h in messages]
    assert len(positions) == len(set(positions)) == 50 + 10 + 5 + 1 + 20  # snapshot, updates, deletes, inserts

    env = consumer_env(secure_kafka, secure_registry)
    shown = run(stack, cluster, env, "set", "status", set_name, "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["position"] is not None and "error" not in info["kafka"], info
    # the registry's credentials in its URL (taken out at once), for tail
    url = secure_registry.url.replace("https://", f"https://pgshovel:{secure_registry.password}@")
    tail = run(stack, cluster, {**env, "PGSHOVEL_SCHEMA_REGISTRY": url, "PGSHOVEL_SCHEMA_REGISTRY_USER_INFO": ""},
               "tail", set_name, "--from-beginning", "--format", "json")
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == len(positions)
    assert secure_registry.password not in tail.stdout + tail.stderr
    verified = run(stack, cluster, env, "set", "verify", set_name, "--no-wait")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replicated = run(stack, cluster, env, "replicate", set_name, "--target", target.dsn, "--until-caught-up")
    assert replicated.returncode == 0, replicated.stderr
    with db.cursor() as cur:
        cur.execute(f'SELECT * FROM "{schema}".items ORDER BY id')
        source = cur.fetchall()
    with target.connect().cursor() as cur:
        cur.execute(f'SELECT * FROM "{schema}".items ORDER BY id')
        assert cur.fetchall() == source


MECHANISMS = {
    "scram-sha-256": lambda k: (k.bootstrap, k.properties(RELAY, "SCRAM-SHA-256")),
    "plain": lambda k: (k.bootstrap, k.properties(RELAY, "PLAIN")),
    "oauthbearer": lambda k: (k.oauth, {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
                                        "enable.sasl.oauthbearer.unsecure.jwt": "true",
                                        "sasl.oauthbearer.config": f"principal={RELAY}", "ssl.ca.location": k.ca}),
    "mtls": lambda k: (k.mtls, {"security.protocol": "SSL", "ssl.ca.location": k.ca,
                                "ssl.certificate.location": k.client_cert, "ssl.key.location": k.client_key}),
}


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_producer_speaks_every_mechanism(secure_kafka, producer_kind, mechanism, tmp_path):
    """The relay's sink (native producer and confluent_kafka) commits a Kafka transaction over SASL
    PLAIN, SCRAM-SHA-256, OAUTHBEARER (unsecured JWT) and mTLS."""
    from pgshovel2.config import TopicsConfig
    from pgshovel2.sinks.kafka import KafkaSink

    bootstrap, props = MECHANISMS[mechanism](secure_kafka)
    path = secure_kafka.write_properties(tmp_path / "client.properties", props, bootstrap)
    kafka = KafkaSettings.load(None, str(path), environ={})
    topic = f"{TOPIC_PREFIX}-{mechanism}-{uuid.uuid4().hex[:6]}"
    sink = KafkaSink(kafka, f"pgshovel2.test.{topic}")
    try:
        assert (sink._many is not None) == (producer_kind == "native")
        sink.ensure_topics({topic: "delete"}, TopicsConfig())
        sink.start()
        for i in range(3):
            sink.produce(topic, f"k{i}".encode(), f"v{i}".encode(), [("n", str(i))])
        sink.commit()
    finally:
        sink.close()
    assert [v for _, v, _ in committed(consumer_settings(secure_kafka), topic)] == [b"v0", b"v1", b"v2"]


def test_settings_errors_name_the_property_and_its_origin(secure_kafka, tmp_path, monkeypatch):
    """A misconfiguration is refused before any client connects, naming the property and its file line."""
    path = secure_kafka.write_properties(tmp_path / "bad.properties", {**secure_kafka.properties(),
                                                                       "sasl.mechanisms": "SCRAM-SHA-1024"})
    with pytest.raises(kafkaconf.KafkaSettingsError, match=r"sasl.mechanisms from file .*bad.properties, line 4"):
        KafkaSettings.load(None, str(path), environ={}).check()
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    with pytest.raises(Exception, match=r"sasl.password \(variable PGSHOVEL_KAFKA_SASL_PASSWORD\).*NO_SUCH_SECRET"):
        KafkaSettings.load(None, str(path), environ={"PGSHOVEL_KAFKA_SASL_PASSWORD": "env:NO_SUCH_SECRET"})
