"""DDL mid-stream and set upgrade of a logical set on every server (pg15: our plugin; the stock
servers: decoder pgoutput as the non-superuser app, without prepared transactions)."""

from tests.integration.test_logical_ddl import test_add_drop_rename_while_writing as _ddl
from tests.integration.test_logical_ddl import (
    test_upgrade_adds_table_and_column_removes_table_under_writers as _upgrade,
)
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


def test_ddl_on_every_server(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    _ddl(stack, cluster, db, schema, tmp_path, relay_factory, "logical" if stack.stock is None else "pgoutput")


def test_upgrade_on_every_server(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    _upgrade(stack, cluster, db, schema, tmp_path, relay_factory, "logical" if stack.stock is None else "pgoutput")
