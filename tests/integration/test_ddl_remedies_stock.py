"""The DDL remedy tests on stock servers (no C of ours, no superuser: what managed services give):
the PL/pgSQL capture and pgoutput paths, where no event trigger reports a DROP TABLE and the relay
notices it itself. Each stock major of PGSHOVEL2_TEST_STOCK (tests/stock.py)."""

import pytest

from tests.integration import test_ddl_drop, test_ddl_remedies
from tests.stock import Target

STOCK_PATHS = ["plpgsql", "pgoutput"]


@pytest.fixture
def stack(base_stack, stock_pg):
    """The stock server as the tests' stack (dsn: the non-superuser app), with the session's ZooKeeper,
    Kafka and registry."""
    return Target(f"stock{stock_pg.major}", stock_pg.major, stock_pg.dsn, stock_pg.admin_dsn, has_our_c=False,
                  is_superuser=False, stack=base_stack, stock=stock_pg)


@pytest.mark.parametrize("path", STOCK_PATHS)
def test_widenings_go_on(stack, cluster, db, schema, tmp_path, relay_factory, path):
    test_ddl_remedies.test_widenings_go_on_and_keys_keep_their_bytes(stack, cluster, db, schema, tmp_path,
                                                                     relay_factory, path)


@pytest.mark.parametrize("path", STOCK_PATHS)
def test_incompatible_change_and_accept(stack, cluster, db, schema, tmp_path, relay_factory, path):
    test_ddl_remedies.test_incompatible_change_waits_then_accept_registers_the_schema(
        stack, cluster, db, schema, tmp_path, relay_factory, path)


@pytest.mark.parametrize("path", STOCK_PATHS)
def test_drop_table_noticed_by_the_relay(stack, cluster, db, schema, tmp_path, relay_factory, path):
    test_ddl_drop.test_drop_table_ends_it_at_its_position_and_the_others_go_on(
        stack, cluster, db, schema, tmp_path, relay_factory, path)
    assert "noticed by the relay" in (tmp_path / "drp.log").read_text()
