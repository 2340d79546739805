"""PgQ's choice of a batch's last tick and its batch SQL, as pgshovel2.relay.pgq.ahead predicts them
(tests/integration/test_pgq_ahead.py compares them with PgQ's own)."""

import pytest

from pgshovel2.relay.pgq.ahead import batch_sql, choose_tick, event_tables


@pytest.mark.parametrize(("merged", "latest_events", "expected"), [
    (True, 150, 9),   # between min_count and twice it: the latest tick
    (True, 100, 9),
    (True, 201, 5),   # more than twice: the first tick reaching min_count
    (True, 99, 3),    # fewer than min_count: the merged poll opens nothing, the plain one the next tick
    (False, 150, 3),  # not behind: the next tick
])
def test_the_tick_a_poll_ends_its_batch_at(merged, latest_events, expected):
    assert choose_tick(merged, 100, 9, latest_events, 5, 3) == expected


def test_no_tick_after_the_batch_no_prediction():
    assert choose_tick(True, 100, None, None, None, None) is None


def test_transactions_gone_since_the_first_tick_lower_the_start_or_are_read_by_txid():
    text = batch_sql(7, 9, 3, 4, ["pgq.event_3_1"], 1000, 1200, [995, 960, 700, 650])
    assert "ev.ev_txid >= 960 and ev.ev_txid <= 1200" in text  # 995, then 960 within 100 of it
    assert "where ev.ev_txid in (700,650) and (ev_owner is null or ev_owner = 4)" in text
    assert text.endswith(" order by 1") and text.count("pgq.event_3_1 ev ") == 2
    plain = batch_sql(7, 9, 3, 4, ["pgq.event_3_0", "pgq.event_3_1"], 1000, 1200, [])
    assert " union all " in plain and "ev_txid in" not in plain


@pytest.mark.parametrize(("step1", "step2", "tx_min", "tx_max", "expected"), [
    (500, None, 100, 400, ["prev"]),        # all before the switch: the previous table
    (500, 600, 700, 900, ["cur"]),          # all after it settled: the current one
    (500, 600, 550, 900, ["prev", "cur"]),  # across it
    (None, None, 1, 2, ["prev", "cur"]),
])
def test_the_event_tables_a_batch_reads(step1, step2, tx_min, tx_max, expected):
    assert event_tables("prev", "cur", step1, step2, tx_min, tx_max) == expected
