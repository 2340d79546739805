"""Exactly-once at the dangerous moments: killed between the Kafka commit and
pgq.finish_batch, a huge source transaction split over Kafka transactions
and killed between them, and the idempotent-only mode kept for comparison."""

import signal
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from pgshovel2 import names
from pgshovel2.relay.build import transactional_id
from tests.helpers import RelayProcess, assert_verified, caught_up, messages, pgshovel, verify, write_config


@pytest.fixture
def keyed_set(stack, cluster, db, schema, tmp_path):
    """A set "eo" on <schema>.t (id int PRIMARY KEY, n int), snapshot taken; returns its topics."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, n int)')
    prefix = f"eo{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", "eo", str(cfg))
    return names.table_topic(prefix, schema, "t"), names.transactions_topic(prefix)


def run_relay(stack, cluster, tmp_path, *args: str, failpoints: str = "") -> RelayProcess:
    log = tmp_path / f"relay-{len(list(tmp_path.glob('relay-*')))}.log"
    return RelayProcess(stack, cluster, "eo", *args, log_path=log,
                        extra_env={"PGSHOVEL2_FAILPOINTS": failpoints} if failpoints else None)


def relaying_100_rows(stack, cluster, db, schema: str, tmp_path) -> RelayProcess:
    """A relay of "eo", its snapshot done, with rows 1..100 (n = 0) inserted and relayed."""
    relay = run_relay(stack, cluster, tmp_path)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, 0 FROM generate_series(1, 100) g')
    caught_up(stack, cluster, "eo")
    return relay


def test_killed_between_kafka_commit_and_finish_batch(stack, cluster, db, schema, tmp_path, keyed_set):
    topic, _ = keyed_set
    first = run_relay(stack, cluster, tmp_path)
    first.wait_for("snapshot done")
    assert first.stop() == 0
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, 0 FROM generate_series(1, 500) g')
    dying = run_relay(stack, cluster, tmp_path, failpoints="after_commit=1")
    assert dying.proc.wait(60) == -signal.SIGKILL, dying.log()
    relay = run_relay(stack, cluster, tmp_path)
    caught_up(stack, cluster, "eo")
    assert "already in Kafka (committed before a restart): acknowledging it" in relay.log()
    keys = Counter(k["id"] for k, _, h in messages(stack, topic))
    assert set(keys) == set(range(1, 501)) and set(keys.values()) == {1}
    assert relay.stop() == 0


def test_huge_transaction_split_over_kafka_transactions_and_killed(stack, cluster, db, schema, tmp_path,
                                                                  keyed_set):
    topic, txn_topic = keyed_set
    first = run_relay(stack, cluster, tmp_path)
    first.wait_for("snapshot done")
    assert first.stop() == 0
    rows = 150_000  # 30 hard splits: the kills land inside it before it is all relayed (a relay with nothing
    # left to commit never reaches its failpoint)
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, 0 FROM generate_series(1, {rows}) g')
    kills, resumed = 0, 0
    while resumed < 3 and kills < 40:  # hard split every 10 x 500 messages; runs die after a commit or two
        relay = run_relay(stack, cluster, tmp_path, "--max-transaction-messages", "500",
                          failpoints="before_commit=0.2,after_commit=0.3")
        assert relay.proc.wait(120) == -signal.SIGKILL, relay.log()
        kills += 1
        resumed += "resuming batch of ticks" in relay.log()
    relay = run_relay(stack, cluster, tmp_path)
    caught_up(stack, cluster, "eo")
    relay.stop()
    assert resumed >= 3, "too few kills landed inside the split source transaction"
    got = messages(stack, topic)
    assert Counter(k["id"] for k, _, _ in got) == Counter(range(1, rows + 1))
    positions = [h["pgshovel.position"] for _, _, h in got]
    assert positions == sorted(positions)
    records = [v for _, v, _ in messages(stack, txn_topic)]
    assert [r["type"] for r in records] == ["BEGIN", "END"]
    assert records[1]["event_count"] == rows
    assert_verified(verify(stack, cluster, "eo"))


def test_zombie_relay_is_fenced(stack, cluster, db, schema, tmp_path, keyed_set):
    topic, _ = keyed_set
    zombie = relaying_100_rows(stack, cluster, db, schema, tmp_path)
    zombie.proc.send_signal(signal.SIGSTOP)
    successor = run_relay(stack, cluster, tmp_path)
    successor.wait_for("resuming after tick")
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".t SET n = 1')
    caught_up(stack, cluster, "eo")
    zombie.proc.send_signal(signal.SIGCONT)
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".t SET n = 2')
    # The zombie finds its ZooKeeper session expired and stands by, or, if it gets to commit
    # first, is fenced by Kafka and exits: either way it writes nothing more.
    deadline = time.monotonic() + 60
    while zombie.proc.poll() is None and "no longer the active relay" not in zombie.log():
        assert time.monotonic() < deadline, zombie.log()
        time.sleep(0.1)
    if zombie.proc.poll() is not None:
        assert zombie.proc.returncode == 1 and "took over" in zombie.log()
    caught_up(stack, cluster, "eo")
    assert successor.proc.poll() is None, successor.log()
    zombie.stop(signal.SIGKILL)
    ops = Counter((k["id"], h["pgshovel.op"]) for k, _, h in messages(stack, topic))
    assert set(ops.values()) == {1, 2} and sum(ops.values()) == 300  # c once, u twice per key
    assert successor.stop() == 0
    assert_verified(verify(stack, cluster, "eo"))


def test_idempotent_only_mode(stack, cluster, db, schema, tmp_path, keyed_set):
    topic, _ = keyed_set
    relay = run_relay(stack, cluster, tmp_path, "--no-transactions")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, 0 FROM generate_series(1, 100) g')
        cur.execute(f'UPDATE "{schema}".t SET n = 1 WHERE id <= 10')
    caught_up(stack, cluster, "eo")
    ops = Counter(h["pgshovel.op"] for _, _, h in messages(stack, topic))
    assert ops == {"c": 100, "u": 10}
    assert relay.stop() == 0
    assert_verified(verify(stack, cluster, "eo"))


def test_a_stray_producer_init_does_not_stop_the_active_relay(stack, cluster, db, schema, tmp_path, keyed_set):
    """A former relay stopped in the middle of initializing its Kafka producer and resumed after a
    successor took over bumps the transactional epoch late (the chaos run's zombie did). The active
    relay, fenced while it still holds the set's lock, re-initializes and goes on: nothing lost, no
    duplicate."""
    topic, _ = keyed_set
    relay = relaying_100_rows(stack, cluster, db, schema, tmp_path)
    stray = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": transactional_id(cluster, "eo")})
    stray.init_transactions(30)  # the late InitProducerId: the relay's producer is fenced
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, 1 FROM generate_series(101, 200) g')
    relay.wait_for("re-initializing the producer")
    caught_up(stack, cluster, "eo")
    assert relay.proc.poll() is None, relay.log()
    keys = Counter(k["id"] for k, _, h in messages(stack, topic))
    assert set(keys) == set(range(1, 201)) and set(keys.values()) == {1}
    assert_verified(verify(stack, cluster, "eo"))
    assert relay.stop() == 0
