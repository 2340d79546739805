"""The backend contract tests on stock PostgreSQL servers (tests/stock.py: PGSHOVEL2_TEST_STOCK,
default 14 and 17; ``make test-matrix``: 14, 16, 17, 18), as a role with LOGIN and REPLICATION
that owns the database and is not a superuser, like a managed service's: no C of ours, no pgq
extension, no pgqd, ``max_prepared_transactions = 0``.

The trigger backend runs there with PgQ's PL-only build (installed by set create), the
PL/pgSQL capture (schema pgshovel2_pl) and the relay ticking its own queue; the logical
backend through pgoutput and a publication; admin commands commit without PREPARE. The same
test functions as on Debian's PG 15 (imported; fixtures resolve in this module, so ``stack``
is the stock server's)."""

import pytest

from tests.integration.test_relay import (  # noqa: F401
    test_operations_and_key_update,
    test_quoted_identifiers,
    test_sigkill_mid_batch_loses_nothing,
    test_snapshot_and_stream_equal_source_with_writers,
)
from tests.integration.test_types import test_every_type_round_trips, typed_table  # noqa: F401
from tests.stock import make_target


@pytest.fixture(scope="session")
def stack(stock_pg, base_stack, stock_servers):
    """The stock server of this run (as app) with the session's ZooKeeper, Kafka and registry."""
    return make_target(f"stock{stock_pg.major}", base_stack, stock_servers)


@pytest.fixture(params=["trigger", "pgoutput"])
def backend(request) -> str:
    """The backends that run on a stock server: trigger, and logical through pgoutput."""
    return request.param
