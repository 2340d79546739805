"""Partitioned tables on stock servers (tests/stock.py: PGSHOVEL2_TEST_STOCK, default 14 and 17;
``make test-matrix``: 14, 16, 17, 18), as the non-superuser app role: the paths that run there,
trigger with PL/pgSQL capture and logical with pgoutput. No event triggers there: the relay gives
partitions created or attached later their TRUNCATE trigger (pgshovel2.relay.ddl.partition_watch)."""

import pytest

from tests.helpers import pgshovel
from tests.integration.test_partitioned import (  # noqa: F401
    check,
    make_orders,
    set_config,
    test_overlapping_partitions_are_refused,
    test_partitions_created_and_attached_later,
    test_partitions_go_to_the_tables_topic,
)
from tests.stock import make_target


@pytest.fixture(scope="session")
def stack(stock_pg, base_stack, stock_servers):
    """The stock server of this run (as app) with the session's ZooKeeper, Kafka and registry."""
    return make_target(f"stock{stock_pg.major}", base_stack, stock_servers)


@pytest.fixture(params=["plpgsql", "pgoutput"])
def path(request) -> str:
    """The capture paths of a stock server."""
    return request.param


def test_moves_without_event_triggers(stack, cluster, db, schema, tmp_path, relay_factory, path):
    """Without event triggers the relay finds partition moves afterwards: a DETACHed partition's rows
    are relayed as deletes then; a partition ATTACHed with rows, and one dropped, are named in the
    log and in set status (their rows are not relayed), never silently."""
    with db.cursor() as cur:
        table = make_orders(cur, schema)
    cfg = set_config(tmp_path, stack, schema, path, f"mv{path}{cluster}")
    pgshovel(stack, cluster, "set", "create", "mv", str(cfg))
    relay = relay_factory("mv")
    relay.wait_for("snapshot done")
    relay.wait_for("watched for ATTACH and DETACH")  # the relay's first look: it saw the partitions
    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_2025")
    relay.wait_for("orders_2025 of set table")
    check(stack, cluster, "mv", db, table)
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {s}.orders_x (LIKE {table})")
        cur.execute(f"INSERT INTO {s}.orders_x VALUES (9001, '2028-02-02', 'attached', 1)")
        cur.execute(f"DELETE FROM {s}.orders_other WHERE day >= '2028-01-01'")
        cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {s}.orders_x "
                    "FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')")
        cur.execute(f"DROP TABLE {s}.orders_2024")
    relay.wait_for("orders_x of set table")
    relay.wait_for("orders_2024 of set table")
    status = pgshovel(stack, cluster, "set", "status", "mv").stdout
    assert "orders_x of " in status and "joined holding rows" in status, status
    assert "orders_2024 of " in status and "NOT relayed as deletes" in status, status
    assert relay.stop() == 0
