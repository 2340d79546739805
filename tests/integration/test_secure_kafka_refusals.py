"""What a secured Kafka or schema registry refuses (issue #67 item 1, 2): a wrong password, a missing
ACL (the transactional id's, WRITE on the topics, the consumer groups'), no registry credentials.
Each stops the relay (or the consumer) with an error naming what is missing, and nothing is
written; once the missing ACL is granted, the relay delivers every change exactly once. The
registry's credentials, given in its URL, never show in a log, an error, a znode or set status."""

import json
import uuid

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from pgshovel2.cluster import ClusterStore
from tests.integration.test_secure_kafka import (
    committed,
    consumer_env,
    consumer_settings,
    make_set,
    relay_env,
    run,
    start_relay,
    wait_caught_up,
)
from tests.secure import TOPIC_PREFIX

TOPIC, TXN, GROUP = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP
Op = AclOperation


def set_topics(stack, cluster, set_name) -> list[str]:
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    return [record.topic(t) for t in record.tables] + [record.topics.transactions, record.topics.positions]


def existing(secure_kafka, topics: list[str]) -> list[str]:
    """The topics of topics that exist in the secured Kafka (asked as its super user)."""
    listed = secure_kafka.admin().list_topics(timeout=30).topics
    return [t for t in topics if t in listed]


def exits(relay, timeout: float = 120) -> str:
    """The relay's log once it exited with status 1 (fails if it runs on)."""
    code = relay.proc.wait(timeout)
    relay.stop()
    assert code == 1, f"relay exited {code}:\n{relay.log()}"
    return relay.log()


def limited_user(secure_kafka, grants: list[tuple]) -> tuple[str, str]:
    """(name, password) of a new SCRAM user with only the ALLOW ACLs grants."""
    name, password = f"limited-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    secure_kafka.add_user(name, password, grants)
    return name, password


def test_wrong_password(stack, cluster, db, schema, tmp_path, secure_kafka, secure_registry):
    set_name = make_set(stack, cluster, db, schema, tmp_path, "wrongpw")
    env = {**relay_env(secure_kafka, secure_registry, tmp_path, **{"sasl.password": "env:WRONG_PASSWORD"}),
           "WRONG_PASSWORD": "not-the-password"}
    log = exits(start_relay(stack, cluster, set_name, tmp_path, env))
    assert "Kafka authentication failed" in log and "sasl.password from file" in log, log
    assert "from env:WRONG_PASSWORD" in log and "not-the-password" not in log, log
    assert existing(secure_kafka, set_topics(stack, cluster, set_name)) == []
    tail = run(stack, cluster, consumer_env(secure_kafka, secure_registry, CONSUMER_KAFKA_PASSWORD="wrong-too"),
               "tail", set_name)
    assert tail.returncode == 1 and "Kafka authentication failed" in tail.stderr, tail.stderr
    assert "sasl.password from variable PGSHOVEL_KAFKA_SASL_PASSWORD" in tail.stderr, tail.stderr


def test_no_transactional_id_acl(stack, cluster, db, schema, tmp_path, secure_kafka, secure_registry):
    """Without WRITE on its transactional id the relay stops naming it; no message is visible."""
    set_name = make_set(stack, cluster, db, schema, tmp_path, "notxn")
    user, password = limited_user(secure_kafka, [(TOPIC, TOPIC_PREFIX, [Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE]),
                                                 (GROUP, "pgshovel2", [Op.READ])])
    env = relay_env(secure_kafka, secure_registry, tmp_path, user, **{"sasl.password": password})
    log = exits(start_relay(stack, cluster, set_name, tmp_path, env))
    assert f"TransactionalId 'pgshovel2.{cluster}.{set_name}'" in log and "Transactional Id authorization failed" in log
    kafka = consumer_settings(secure_kafka)
    for topic in existing(secure_kafka, set_topics(stack, cluster, set_name)):
        assert committed(kafka, topic) == [], topic


def test_no_write_on_topics_then_granted(stack, cluster, db, schema, tmp_path, secure_kafka, secure_registry):
    """Without WRITE on the set's topics the relay stops naming the ACL, nothing is visible and
    nothing acknowledged: once WRITE is granted every row arrives once. A consumer without READ
    on the consumer groups gets an error naming them."""
    set_name = make_set(stack, cluster, db, schema, tmp_path, "nowrite")
    user, password = limited_user(secure_kafka, [(TOPIC, TOPIC_PREFIX, [Op.CREATE, Op.READ, Op.DESCRIBE]),
                                                 (TXN, "pgshovel2.", [Op.WRITE, Op.DESCRIBE]),
                                                 (GROUP, "pgshovel2", [Op.READ])])
    env = relay_env(secure_kafka, secure_registry, tmp_path, user, **{"sasl.password": password})
    log = exits(start_relay(stack, cluster, set_name, tmp_path, env))
    assert "Topic authorization failed" in log and "WRITE and DESCRIBE on the set's topics" in log, log
    kafka = consumer_settings(secure_kafka)
    topics = set_topics(stack, cluster, set_name)
    assert existing(secure_kafka, topics), "the relay creates its topics first"
    for topic in existing(secure_kafka, topics):
        assert committed(kafka, topic) == [], topic

    admin = secure_kafka.admin()
    grant = AclBinding(TOPIC, TOPIC_PREFIX, ResourcePatternType.PREFIXED, f"User:{user}", "*", Op.WRITE,
                       AclPermissionType.ALLOW)
    for future in admin.create_acls([grant]).values():
        future.result()
    relay = start_relay(stack, cluster, set_name, tmp_path, env)
    wait_caught_up(stack, cluster, set_name, kafka)
    relay.stop()
    data = committed(kafka, topics[0])
    assert len(data) == 50 and len({dict(h)["pgshovel.position"] for _, _, h in data}) == 50

    reader, reader_password = limited_user(secure_kafka, [(TOPIC, TOPIC_PREFIX, [Op.READ, Op.DESCRIBE])])
    tail = run(stack, cluster, consumer_env(secure_kafka, secure_registry, PGSHOVEL_KAFKA_SASL_USERNAME=reader,
                                            CONSUMER_KAFKA_PASSWORD=reader_password), "tail", set_name,
               "--from-beginning")
    assert tail.returncode == 1, tail.stdout
    assert "Group authorization failed" in tail.stderr and "consumer groups of the group.id prefix" in tail.stderr


def test_no_registry_credentials(stack, cluster, db, schema, tmp_path, secure_kafka, secure_registry):
    set_name = make_set(stack, cluster, db, schema, tmp_path, "noreg")
    env = {**relay_env(secure_kafka, secure_registry, tmp_path), "PGSHOVEL_SCHEMA_REGISTRY_USER_INFO": ""}
    log = exits(start_relay(stack, cluster, set_name, tmp_path, env))
    assert "the registry wants credentials (HTTP 401): set --schema-registry-user-info" in log, log
    kafka = consumer_settings(secure_kafka)
    for topic in existing(secure_kafka, set_topics(stack, cluster, set_name)):
        assert committed(kafka, topic) == [], topic


def test_registry_credentials_in_its_url_never_show(stack, cluster, db, schema, tmp_path, secure_kafka,
                                                    secure_registry):
    """Finding "schema-registry credentials only in the URL; printed in errors and stored in the
    world-readable relay/last_error znode": a URL with user info is accepted, and its password is
    shown nowhere -- relay log, last_error znode, set status -- when the registry refuses it or
    cannot be reached. The relay writes to the test stack's plain Kafka here: only the registry's
    handling is under test (SSL_CERT_FILE lets a client without CA options verify the registry)."""
    set_name = make_set(stack, cluster, db, schema, tmp_path, "urlcreds")
    secret = f"Wrong-{uuid.uuid4().hex}"
    url = secure_registry.url.replace("https://", f"https://pgshovel:{secret}@")
    env = {**secure_registry.env(), "PGSHOVEL_SCHEMA_REGISTRY": url, "PGSHOVEL_SCHEMA_REGISTRY_USER_INFO": "",
           "SSL_CERT_FILE": secure_registry.ca}
    log = exits(start_relay(stack, cluster, set_name, tmp_path, env))
    assert "the registry refused the credentials (HTTP 401; user info from the schema registry URL)" in log, log
    with ClusterStore(stack.zk, cluster) as store:
        last_error = store.get_relay_record(set_name, "last_error")
    assert last_error and "HTTP 401" in last_error["message"], last_error
    shown = run(stack, cluster, {}, "set", "status", set_name, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["last_error"], shown.stdout
    for where, text in (("relay log", log), ("last_error znode", json.dumps(last_error)), ("set status", shown.stdout)):
        assert secret not in text, f"the registry password shows in the {where}"

    unreachable = start_relay(stack, cluster, set_name, tmp_path, {
        "PGSHOVEL_SCHEMA_REGISTRY": f"http://pgshovel:{secret}@127.0.0.1:1/apis/ccompat/v7"})
    unreachable.wait_for("unreachable")
    unreachable.stop()
    assert secret not in unreachable.log(), "the registry password shows in the relay log"

    good = url.replace(secret, secure_registry.password)
    relay = start_relay(stack, cluster, set_name, tmp_path, {**env, "PGSHOVEL_SCHEMA_REGISTRY": good})
    relay.wait_for("snapshot done")
    relay.stop()
    assert secure_registry.password not in relay.log()
