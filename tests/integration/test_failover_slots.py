"""A logical set (decoder pgoutput, role app) fails over with its slot on stock PostgreSQL 17.

A primary and a physical standby of it (tests.stock.make_standby: a physical slot, hot standby
feedback, sync_replication_slots on the standby, synchronized_standby_slots on the primary).
The set's slot is a failover slot; once ``set status --standby`` says it is synced, the standby
is promoted under load, the old primary keeps committing for a while and is then stopped, the
set is repointed and the relay continues from the synced slot.

Ground truth: an audit trigger table (txid, key, op, in row-envelope ops) written in the same
transaction as every change; it reaches the standby physically, so the promoted server's audit
table holds exactly the transactions the new primary has. Kafka must hold each of them once,
and nothing else: in particular none of the transactions the old primary committed after the
standby stopped receiving (lost from the database, so they must be absent from Kafka too --
synchronized_standby_slots holds the logical stream back until the standby has the WAL).
"""

import os
import threading
import time
from collections import Counter

import psycopg2
import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics
from tests.helpers import Decoder, assert_verified, caught_up, pgshovel, verify, write_config
from tests.integration.test_relay import writer
from tests.stock import StockServer, Target, make_standby
from tests.workers import port_of

AUDIT = """
CREATE TABLE audit (seq bigserial PRIMARY KEY, txid bigint NOT NULL, key int NOT NULL, op text NOT NULL);
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO audit (txid, key, op) VALUES (txid_current(), NEW.id, 'c');
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO audit (txid, key, op) VALUES (txid_current(), OLD.id, 'd');
  ELSIF OLD.id <> NEW.id THEN
    INSERT INTO audit (txid, key, op) VALUES (txid_current(), OLD.id, 'd'), (txid_current(), NEW.id, 'c');
  ELSE
    INSERT INTO audit (txid, key, op) VALUES (txid_current(), NEW.id, 'u');
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON acct FOR EACH ROW EXECUTE FUNCTION audit();
"""


@pytest.fixture
def pair():
    """(primary, standby): stock PostgreSQL 17 on their own ports, the standby streaming through
    physical slot standby1; both removed afterwards."""
    port = port_of("TEST_STOCK_PG_PORT") + 8
    base = os.environ.get("TEST_STACK_DIR", "/tmp/stack-test")
    primary = StockServer(17, port, f"{base}-fo-primary")
    standby = StockServer(17, port + 1, f"{base}-fo-standby")
    primary.start()
    try:
        make_standby(primary, standby, "standby1")
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()


def run_writers(dsn: str, table: str = "acct", count: int = 3) -> tuple[threading.Event, list[threading.Thread]]:
    """Writers (tests.integration.test_relay.writer) on table until stopped or the server goes."""
    def one(seed: int) -> None:
        try:
            writer(dsn, table, stop, seed)
        except psycopg2.Error:
            pass  # the server went away (the failover)

    stop = threading.Event()
    threads = [threading.Thread(target=one, args=(seed,), daemon=True) for seed in range(count)]
    for t in threads:
        t.start()
    return stop, threads


def stop_writers(stop: threading.Event, threads: list[threading.Thread]) -> None:
    stop.set()
    for t in threads:
        t.join(30)


def audit_rows(server: StockServer) -> Counter:
    """(txid, key, op) of every audited change committed on server."""
    return Counter(server.query("SELECT txid, key, op FROM audit"))


def relayed(stack, cluster: str, set_name: str) -> Counter:
    """(txid, key, op) of every change message of the set in Kafka (read_committed), snapshot rows left out."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    (topic,) = record.topics.tables.values()
    decode = Decoder(stack.registry)
    return Counter((int(h["pgshovel.txid"]), decode(k)["id"], h["pgshovel.op"])
                   for k, _v, h in read_topics(stack.bootstrap, [topic])[topic] if h["pgshovel.op"] != "r")


def wait_synced(stack, cluster: str, standby: StockServer, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = pgshovel(stack, cluster, "set", "status", "fo", "--standby", standby.dsn).stdout
        if "failover:         failover slot; changes wait for standby slot(s) standby1; synced to standby" in out:
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.5)


def test_failover_slot_continues_on_the_promoted_standby(stack, cluster, pair, tmp_path, relay_factory):
    primary, standby = pair
    target = Target("stock17", 17, primary.dsn, primary.admin_dsn, False, False, stack, primary)
    primary.query("CREATE TABLE acct (id int PRIMARY KEY, n int, s text)")
    primary.query("INSERT INTO acct SELECT g, 0, 'x' FROM generate_series(1, 20000) g")
    cfg = write_config(tmp_path, target, [{"name": "acct"}], backend="pgoutput", topic_prefix=f"fo{cluster}")
    pgshovel(stack, cluster, "set", "create", "fo", str(cfg))
    relay = relay_factory("fo")
    relay.wait_for("snapshot done")
    assert primary.query("SELECT failover FROM pg_replication_slots WHERE slot_type = 'logical'") == [(True,)]
    primary.query(AUDIT)  # after the snapshot: every audited transaction is streamed by the slot
    load = run_writers(primary.dsn)
    status = wait_synced(stack, cluster, standby)
    print(status)
    time.sleep(3)
    standby.promote()  # under load: the old primary keeps committing what the standby never gets
    time.sleep(2)
    stop_writers(*load)
    on_old_primary = audit_rows(primary)
    primary.script("down", "17")  # the old primary is gone (an immediate stop)
    out = pgshovel(stack, cluster, "set", "repoint", "fo", "--dsn", standby.dsn).stdout
    assert "slot pgshovel2_" in out and "synced from the old primary" in out, out
    relay.wait_for("repointed", timeout=60)
    caught_up(stack, cluster, "fo", timeout=120)
    # before anything is written on the new primary (whose txids continue from the same counter)
    only_old = {txid for txid, _k, _o in on_old_primary - audit_rows(standby)}
    in_kafka = {txid for txid, _k, _o in relayed(stack, cluster, "fo")}
    assert only_old, "the old primary committed nothing after the promotion: the next check proves nothing"
    assert not only_old & in_kafka, f"transactions the new primary lacks are in Kafka: {sorted(only_old & in_kafka)}"
    load = run_writers(standby.dsn)
    time.sleep(3)
    stop_writers(*load)
    caught_up(stack, cluster, "fo", timeout=120)
    expected, got = audit_rows(standby), relayed(stack, cluster, "fo")
    lost, duplicated = expected - got, got - expected
    print(f"failover: {sum(expected.values())} changes expected, {sum(got.values())} relayed, "
          f"{len(only_old)} transactions committed on the old primary only (none in Kafka)")
    assert sum(expected.values()) > 1000
    assert not lost and not duplicated, (sorted(lost)[:5], sorted(duplicated)[:5])
    assert_verified(verify(stack, cluster, "fo"))
    assert relay.proc.poll() is None, relay.log()
