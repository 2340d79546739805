"""Kafka client settings (pgshovel2.kafkaconf, javaprops, secretref, kafkajava): where properties come
from, which wins, what is refused, that errors name a property's origin and never a secret, and the
Java form Spark's Kafka source gets."""

import re
import subprocess
from pathlib import Path

import pytest

from pgshovel2 import javaprops, kafkaconf, kafkajava, secretref
from pgshovel2.kafkaconf import KafkaSettings, KafkaSettingsError

REPO = Path(__file__).resolve().parent.parent.parent


def load(tmp_path: Path, text: str = "", environ: dict | None = None, bootstrap: str | None = None) -> KafkaSettings:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return KafkaSettings.load(bootstrap, str(path), environ=environ or {})


def test_java_properties_syntax():
    text = ("# comment\n! also a comment\n  a.b = one  \nc: two\nd three\ne=x\\\n    y\\\\\nf=\\u00e9\\t\\=\n"
            "empty=\n g\\ h=sp\n# ends with a backslash \\\nlast=1")
    entries = javaprops.parse(text, "f")
    assert [(e.key, e.value, e.line) for e in entries] == [
        ("a.b", "one  ", 3), ("c", "two", 4), ("d", "three", 5), ("e", "xy\\", 6), ("f", "é\t=", 8),
        ("empty", "", 9), ("g h", "sp", 10), ("last", "1", 12)]
    with pytest.raises(javaprops.PropertiesError, match="f, line 1: malformed"):
        javaprops.parse("x=\\u12", "f")


def test_sources_roles_and_precedence(tmp_path, monkeypatch):
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    kafka = load(tmp_path, f"bootstrap.servers=b1:9092\nsecurity.protocol=SSL\nsasl.password=file:{secret}\n"
                           "producer.linger.ms=5\nconsumer.fetch.max.bytes=1000\ngroup.id=acme\n",
                 {"PGSHOVEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "PGSHOVEL_KAFKA_PRODUCER_LINGER_MS": "7",
                  "PGSHOVEL_KAFKA_SASL_USERNAME": "env:USER_VAR", "USER_VAR": "relay",
                  "PGSHOVEL_KAFKA_CONFIG": "ignored: the file is given"})
    assert str(kafka) == kafka.bootstrap == "b1:9092"
    producer = kafka.config("producer", defaults={"linger.ms": 100, "acks": "all"}, ours={"transactional.id": "t"})
    assert producer == {"bootstrap.servers": "b1:9092", "linger.ms": "7", "acks": "all",
                        "security.protocol": "SASL_SSL", "sasl.password": "s3cret", "sasl.username": "relay",
                        "transactional.id": "t"}
    assert "fetch.max.bytes" not in producer and kafka.config("consumer")["fetch.max.bytes"] == "1000"
    assert kafka.origin("security.protocol") == "variable PGSHOVEL_KAFKA_SECURITY_PROTOCOL"
    assert kafka.origin("sasl.password") == f"file {tmp_path}/client.properties, line 3, from file:{secret}"
    assert kafka.origin("linger.ms", "producer") == "variable PGSHOVEL_KAFKA_PRODUCER_LINGER_MS"
    assert re.fullmatch(r"acme-reader-[0-9a-f-]{36}", kafka.group_id("reader"))
    assert "group.id" not in kafka.config("consumer")
    for shown in (repr(kafka), kafka.describe()):
        assert "s3cret" not in shown and "relay" not in shown
    # a bootstrap string takes this process's environment, as a CLI process does
    monkeypatch.setenv("PGSHOVEL_KAFKA_CONFIG", str(tmp_path / "client.properties"))
    assert kafkaconf.settings("x:1").config("producer")["sasl.password"] == "s3cret"
    assert kafkaconf.settings("x:1").bootstrap == "x:1"
    assert KafkaSettings.load(None, None, environ={}).bootstrap == kafkaconf.DEFAULT_BOOTSTRAP


@pytest.mark.parametrize(("text", "message"), [
    ("isolation.level=read_uncommitted", "isolation.level .* is set by pgshovel2 itself: pgshovel2's consumers read"),
    ("producer.transactional.id=x", "producer.transactional.id .* is set by pgshovel2 itself"),
    ("enable.idempotence=false", "exactly-once delivery needs the idempotent producer"),
    ("consumer.bootstrap.servers=x:1", "the bootstrap servers are the same for every client"),
    ("admin.group.id=x", "only consumers have a group"),
    ("a..b=1", "'a..b' .*: not a property name"),
])
def test_refused_properties_name_their_origin(tmp_path, text, message):
    with pytest.raises(KafkaSettingsError, match=f"{message}") as info:
        load(tmp_path, f"# first line\n{text}\n")
    assert "client.properties, line 2" in str(info.value)


def test_librdkafka_refusals_name_property_and_origin(tmp_path):
    kafka = load(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanisms=SCRAM-SHA-1024\nsasl.username=u\n"
                           "sasl.password=hunter2\n")
    with pytest.raises(KafkaSettingsError, match=r"SCRAM-SHA-1024.*\(sasl.mechanisms from file .*, line 2\)") as info:
        kafka.check()
    assert "hunter2" not in str(info.value)
    kafka = load(tmp_path, "", {"PGSHOVEL_KAFKA_SASL_PASSWRD": "x"})
    with pytest.raises(KafkaSettingsError, match=r"sasl.passwrd from variable PGSHOVEL_KAFKA_SASL_PASSWRD"):
        kafka.check()
    # made through the factories, too (the relay must not retry these)
    with pytest.raises(KafkaSettingsError, match="sasl.passwrd"):
        kafkaconf.admin(kafka)


def test_secret_references(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert secretref.resolve("plain", "x", {}) == "plain"
    assert secretref.resolve("env:A", "x", {"A": "v"}) == "v"
    with pytest.raises(secretref.SecretReferenceError, match="what: env:A: environment variable A is not set"):
        secretref.resolve("env:A", "what", {})
    with pytest.raises(secretref.SecretReferenceError, match="file is empty"):
        secretref.resolve(f"file:{empty}", "what", {})
    with pytest.raises(secretref.SecretReferenceError, match="cannot read the file"):
        secretref.resolve(f"file:{tmp_path}/missing", "what", {})


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """scripts/secure/certs.sh's files in a temporary folder."""
    folder = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO / "scripts" / "secure" / "certs.sh"), str(folder)], check=True, capture_output=True)
    return folder


def test_java_form_for_spark(tmp_path, certs):
    kafka = load(tmp_path, f"security.protocol=sasl_ssl\nsasl.mechanisms=SCRAM-SHA-512\nsasl.username=relay\n"
                           f"sasl.password=pa\"ss\\\\wd\nssl.ca.location={certs}/ca.pem\n"
                           f"ssl.certificate.location={certs}/client.pem\nssl.key.location={certs}/client.key\n"
                           "linger.ms=5\nclient.id=me\nspark.request.timeout.ms=1234\n")
    java = kafkajava.java_properties(kafka)
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="relay" password="pa\\"ss\\\\wd";')
    assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.location"] == f"{certs}/ca.pem"
    assert java["ssl.keystore.type"] == "PEM" and "BEGIN CERTIFICATE" in java["ssl.keystore.certificate.chain"]
    assert "BEGIN PRIVATE KEY" in java["ssl.keystore.key"]
    assert java["client.id"] == "me" and java["request.timeout.ms"] == "1234" and "linger.ms" not in java

    oauth = kafkajava.java_properties(load(tmp_path, "sasl.mechanisms=OAUTHBEARER\n"
                                           "enable.sasl.oauthbearer.unsecure.jwt=true\n"
                                           "sasl.oauthbearer.config=principal=relay scope=a,b lifeSeconds=60\n"))
    assert oauth["sasl.jaas.config"] == ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                         'unsecuredLoginStringClaim_sub="relay" unsecuredLoginListClaim_scope=",a,b" '
                                         'unsecuredLoginLifetimeSeconds="60";')


def test_java_form_refusals(tmp_path, certs):
    pkcs1 = tmp_path / "rsa.key"
    subprocess.run(["openssl", "pkey", "-in", f"{certs}/client.key", "-traditional", "-out", str(pkcs1)], check=True)
    cases = [("sasl.mechanisms=GSSAPI", r"sasl.mechanisms \(file .*line 1\): SASL mechanism GSSAPI has no translation"),
             ("enable.ssl.certificate.verification=false", "turning certificate verification off has no translation"),
             ("sasl.mechanisms=PLAIN\nsasl.username=u", "needs sasl.username and sasl.password"),
             (f"ssl.certificate.location={certs}/client.pem\nssl.key.location={pkcs1}", "PKCS#8 keys only"),
             (f"ssl.certificate.location={certs}/client.pem", "set without its pair")]
    for text, message in cases:
        with pytest.raises(KafkaSettingsError, match=message):
            kafkajava.java_properties(load(tmp_path, text + "\n"))
