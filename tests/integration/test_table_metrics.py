"""Per-table metrics (pgshovel2_relay_table_*): each table's changes by op, its messages' bytes and
when a Kafka commit last carried one, on the native lane's two entries -- whole PgQ transactions
(trigger backend, Lane.encode_txns) and runs of a transaction's changes (logical backend, our plugin
and pgoutput, Lane.encode) -- against the changes made in PostgreSQL."""

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import caught_up, pgshovel, write_config
from tests.integration.test_monitoring import _free_port


def _tables(port: int) -> dict[tuple[str, str, str], float]:
    """The per-table samples: (sample name, table, op or "") -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, s.labels["table"], s.labels.get("op", "")): s.value
            for family in text_string_to_metric_families(text) if family.name.startswith("pgshovel2_relay_table")
            for s in family.samples if not s.name.endswith("_created")}


@pytest.mark.parametrize("backend", ["trigger", "logical", "pgoutput"])
def test_table_counters_count_each_tables_changes_by_op(stack, cluster, db, schema, tmp_path, relay_factory,
                                                       backend):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".a (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".b (id int PRIMARY KEY, v text)')
    tables = [{"schema": schema, "name": "a"}, {"schema": schema, "name": "b"}]
    pgshovel(stack, cluster, "set", "create", "tm", str(write_config(tmp_path, stack, tables, backend=backend)))
    port = _free_port()
    relay = relay_factory("tm", "--metrics-port", str(port))
    relay.wait_for("snapshot done")
    started = time.time()
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".a SELECT g, repeat(\'x\', 100) FROM generate_series(1, 7) g')
        cur.execute(f'UPDATE "{schema}".a SET v = \'y\' WHERE id <= 3')
        cur.execute(f'DELETE FROM "{schema}".a WHERE id = 7')
        cur.execute(f'INSERT INTO "{schema}".b VALUES (1, \'one\'), (2, \'two\')')
    caught_up(stack, cluster, "tm")
    samples = _tables(port)
    a, b = f"{schema}.a", f"{schema}.b"
    changes = {(table, op): v for (name, table, op), v in samples.items()
               if name == "pgshovel2_relay_table_changes_total"}
    assert changes == {(a, "c"): 7, (a, "u"): 3, (a, "d"): 1, (b, "c"): 2}, changes
    # a's 7 rows carry 100-character values: more bytes than b's 2 short rows
    bytes_ = {table: v for (name, table, _), v in samples.items() if name == "pgshovel2_relay_table_bytes_total"}
    assert bytes_[a] > 700 > bytes_[b] > 0, bytes_
    for table in (a, b):
        at = samples[("pgshovel2_relay_table_last_relayed_timestamp_seconds", table, "")]
        assert started - 1 <= at <= time.time()
    assert relay.stop() == 0
