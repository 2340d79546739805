"""Unchanged TOASTed values through our plugin on pg15 (REPLICA IDENTITY DEFAULT: null + the
pgshovel.unchanged header; FULL: the value), every shipped consumer keeping the previous value
(tests/integration/unchanged_toast.py)."""

import pytest

from tests.integration.unchanged_toast import run


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL", "DEFAULT NOT NULL"])
def test_unchanged_toast_plugin(stack, cluster, db, schema, tmp_path, relay_factory, target, identity):
    run(stack, cluster, db, schema, tmp_path, relay_factory, target, "pgshovel2", identity)
