"""``pgshovel audit SET --against kafka``: the source compared with the state rebuilt from Kafka at
the source's own snapshot. Under concurrent writers (updates, deletes, re-inserts, key moves) and
an online snapshot of the table, single-round audits find nothing -- Kafka holds changes newer
than each audit's snapshot, and the audit must leave exactly those out. Then a row that differs
(trigger: changed behind the relay's back with the capture triggers off; logical: a forged message
in the topic) is named by its key, with exit status 3."""

import json
import time

import pytest
from confluent_kafka import Producer

from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics
from tests.helpers import caught_up, pgshovel, write_config
from tests.online import start_writers, stop_writers, wait_state

ROWS = 400


def _audit(stack, cluster: str, set_name: str) -> tuple[int, str]:
    proc = pgshovel(stack, cluster, "audit", set_name, "--against", "kafka", check=False)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, proc.stdout


def _forge(stack, topic: str, key_id: int) -> None:
    """Produce a copy of the last message of key_id with n changed (JSON row envelope)."""
    last = [(k, v, h) for k, v, h in read_topics(stack.bootstrap, [topic])[topic]
            if k is not None and json.loads(k)["id"] == key_id][-1]
    value = json.loads(last[1])
    value["n"] = 424242
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    producer.produce(topic, key=last[0], value=json.dumps(value).encode(), headers=list(last[2].items()))
    producer.flush(30)


@pytest.mark.parametrize("backend, encoding", [("trigger", "avro"), ("logical", "json")])
def test_audit_against_kafka_is_exact_under_writes_and_names_a_differing_row(
        stack, db, schema, cluster, relay_factory, tmp_path, backend, encoding):
    t, set_name = f'"{schema}".t', f"audk{backend[:3]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {t} SELECT g, g, 'row ' || g FROM generate_series(1, {ROWS}) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend=backend, encoding=encoding,
                       topic_prefix=f"{set_name}{cluster}")
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, t, ROWS)
    try:
        time.sleep(1)
        pgshovel(stack, cluster, "set", "snapshot", set_name, "--table", f"{schema}.t", "--chunk-size", "40")
        outputs = [_audit(stack, cluster, set_name) for _ in range(4)]
    finally:
        stop_writers(stop, threads)
    wait_state(stack, cluster, set_name, "done")
    assert all(code == 0 for code, _ in outputs), [out for _, out in outputs]
    assert all("0 differing key(s)" in out and "txid snapshot" in out for _, out in outputs), outputs

    with db.cursor() as cur:
        cur.execute(f"SELECT min(id) FROM {t}")
        key_id = cur.fetchone()[0]
    if backend == "trigger":
        with db.cursor() as cur:  # the capture trigger does not fire: the change never reaches the queue
            cur.execute("SET session_replication_role = replica")
            cur.execute(f"UPDATE {t} SET n = -5 WHERE id = %s", (key_id,))
            cur.execute("SET session_replication_role = DEFAULT")
    else:
        caught_up(stack, cluster, set_name)
        with ClusterStore(stack.zk, cluster) as store:
            record, _ = store.get_set(set_name)
        _forge(stack, record.topics.tables[record.tables[0].qualified], key_id)
    code, out = _audit(stack, cluster, set_name)
    assert code == 3, out
    assert f" key [{key_id}]" in out and "1 differing key(s)" in out, out


@pytest.mark.parametrize("envelope, encoding", [("row", "avro"), ("debezium", "json")])
def test_audit_against_kafka_compares_a_keyless_table_as_a_multiset(stack, db, schema, cluster, relay_factory,
                                                                     tmp_path, envelope, encoding):
    """A keyless table (allow_unkeyed) with equal rows, one of two deleted, one of two updated: no
    difference; one of two equal rows deleted behind the relay's back: that row is named."""
    t, set_name = f'"{schema}".k', f"audkk{envelope[0]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (msg text, n int)")
        cur.execute(f"INSERT INTO {t} VALUES ('a', 1), ('a', 1), ('a', 1), ('b', 2), ('b', 2)")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "k", "allow_unkeyed": True}],
                       encoding=encoding, envelope=envelope, topic_prefix=f"{set_name}{cluster}")
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay_factory(set_name).wait_for("snapshot done")
    one = f"ctid = (SELECT ctid FROM {t} WHERE msg = %s LIMIT 1)"
    with db.cursor() as cur:
        cur.execute(f"DELETE FROM {t} WHERE {one}", ("a",))
        cur.execute(f"UPDATE {t} SET n = 20 WHERE {one}", ("b",))
    code, out = _audit(stack, cluster, set_name)
    assert code == 0 and "4 rows" in out and "0 differing key(s)" in out, out
    with db.cursor() as cur:  # the capture trigger does not fire: the change never reaches the queue
        cur.execute("SET session_replication_role = replica")
        cur.execute(f"DELETE FROM {t} WHERE {one}", ("a",))
        cur.execute("SET session_replication_role = DEFAULT")
    code, out = _audit(stack, cluster, set_name)
    assert code == 3 and "1 differing key(s)" in out, out
    assert "differs:" in out and "'a', 1]" in out, out
