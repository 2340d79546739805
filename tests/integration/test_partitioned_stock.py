"""Partitioned tables on stock servers (tests/stock.py: PGSHOVEL2_TEST_STOCK, default 14 and 17;
``make test-matrix``: 14, 16, 17, 18), as the non-superuser app role: the paths that run there,
trigger with PL/pgSQL capture and logical with pgoutput. No event triggers there: the relay gives
partitions created or attached later their TRUNCATE trigger (pgshovel2.relay.partition_watch)."""

import pytest

from tests.integration.test_partitioned import (  # noqa: F401
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
