"""The relay election in a real ZooKeeper: a standby whose session ended while it waited in line
holds the lock in its new session once the active relay goes, and stays active."""

import threading

import pytest
from kazoo.client import KazooClient

from pgshovel2.cluster import ClusterStore
from pgshovel2.relay.election import Leadership, LeadershipLostError
from tests.helpers import pgshovel, until, write_config


def _expire(hosts: str, store: ClusterStore) -> None:
    """End store's ZooKeeper session from outside (a second client on the same session closes it)."""
    other = KazooClient(hosts=hosts, client_id=store.zk.client_id)
    other.start(10)
    other.stop()
    other.close()


def test_a_standby_whose_session_ended_while_waiting_stays_active_once_it_takes_over(stack, cluster, db, schema,
                                                                                     tmp_path):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY)')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}])
    pgshovel(stack, cluster, "set", "create", "s", str(cfg))
    stop = threading.Event()
    with ClusterStore(stack.zk, cluster) as first_store, ClusterStore(stack.zk, cluster) as second_store:
        first = Leadership(first_store, "s", "first")
        assert first.acquire(stop)
        second = Leadership(second_store, "s", "second")
        acquired: list[bool] = []
        waiter = threading.Thread(target=lambda: acquired.append(second.acquire(stop)), daemon=True)
        waiter.start()
        until(lambda: first_store.contenders("s") == ["first", "second"], "the standby to wait in line", 20)
        _expire(stack.zk, second_store)  # the standby's session ends while it waits in line
        until(second._lost.is_set, "the standby to see its session end", 20)
        first.release()
        waiter.join(30)
        assert acquired == [True]
        second.check()  # active in its new session: no LeadershipLostError
        assert first_store.contenders("s") == ["second"]
        _expire(stack.zk, second_store)  # a session ending after it became active still counts
        until(second._lost.is_set, "the active relay to see its session end", 20)
        with pytest.raises(LeadershipLostError):
            second.check()
        second.release()
