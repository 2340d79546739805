"""envelope: debezium on a REPLICA IDENTITY DEFAULT table through pgoutput on every server (pg15 and
the stock servers, app without superuser, as on a managed service): the scenario of
test_debezium_identity.py with Connect JSON and Debezium's placeholder, and with Avro and null."""

import pytest

from tests.integration.test_debezium_identity import test_debezium_default_identity as scenario
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


@pytest.mark.parametrize(("encoding", "debezium"), [("json", {}), ("avro", {"unchanged_toast": "header"})])
def test_debezium_default_identity_stock(stack, cluster, db, schema, tmp_path, relay_factory,  # noqa: F811
                                         encoding, debezium):
    scenario(stack, cluster, db, schema, tmp_path, relay_factory, "pgoutput", encoding, debezium, "DEFAULT")
