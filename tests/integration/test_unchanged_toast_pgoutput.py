"""Unchanged TOASTed values through pgoutput on every server (pg15 and the stock servers as app),
REPLICA IDENTITY DEFAULT and FULL (tests/integration/unchanged_toast.py)."""

import pytest

from tests.integration.unchanged_toast import run
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL", "DEFAULT NOT NULL"])
def test_unchanged_toast_pgoutput(stack, cluster, db, schema, tmp_path, relay_factory, target,  # noqa: F811
                                  identity):
    run(stack, cluster, db, schema, tmp_path, relay_factory, target, "pgoutput", identity)
