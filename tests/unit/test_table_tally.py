"""TableTally: the native lane's per-call tallies and the Python path's changes add up per table and
reach the per-table metrics once each (take starts anew)."""

from prometheus_client import REGISTRY

from pgshovel2.relay.emit.tally import TableTally
from pgshovel2.relay.monitor.metrics import add_table_counts


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_lane_tallies_and_python_changes_add_up_and_publish_once():
    tally = TableTally()
    tally.add_lane(["s.a", None, "s.b"], [[2, 1, 0, 300], [0, 0, 0, 0], [0, 0, 1, 20]])
    tally.add_lane(["s.a", None, "s.b"], [[1, 0, 0, 100], [0, 0, 0, 0], [0, 0, 0, 0]])
    tally.add("s.b", "U", 50)
    tally.add("s.c", "D", 10)
    add_table_counts("tt", tally.take(), 1234.5)
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.a", op="c") == 3
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.a", op="u") == 1
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.b", op="d") == 1
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.b", op="u") == 1
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.c", op="d") == 1
    assert _value("pgshovel2_relay_table_bytes_total", set="tt", table="s.a") == 400
    assert _value("pgshovel2_relay_table_bytes_total", set="tt", table="s.b") == 70
    assert _value("pgshovel2_relay_table_last_relayed_timestamp_seconds", set="tt", table="s.c") == 1234.5
    add_table_counts("tt", tally.take(), 2000.0)  # nothing new: nothing added, no time moved
    assert _value("pgshovel2_relay_table_changes_total", set="tt", table="s.a", op="c") == 3
    assert _value("pgshovel2_relay_table_last_relayed_timestamp_seconds", set="tt", table="s.a") == 1234.5
