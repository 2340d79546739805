"""Folding of librdkafka's repeated lines (pgshovel2.kafkalog): the first of a kind passes, its
repeats within the window do not, the next one after it says how many were left out; numbers and
the "(after N ms in state X)" tail do not make a new kind."""

import logging

from pgshovel2.kafkalog import Fold, FoldFilter, fold_key

REFUSED = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)"


def test_key_leaves_out_numbers_and_the_state_tail():
    assert fold_key(REFUSED) == "N.N.N.N:N/bootstrap: Connect to ipvN#N.N.N.N:N failed: Connection refused"
    assert fold_key("1/1 brokers are down") == fold_key("0/1 brokers are down")
    assert fold_key(REFUSED.replace("0ms in state CONNECT)", "3ms in state CONNECT, 1 identical error(s) "
                                    "suppressed)")) == fold_key(REFUSED)
    assert fold_key("Broker: Not enough replicas") != fold_key(REFUSED)


def test_repeats_fold_for_the_window_then_come_with_their_count():
    now = [100.0]
    fold = Fold(window=60, clock=lambda: now[0])
    assert fold.admit(REFUSED) == REFUSED
    lines = []
    for step in range(1, 30):
        now[0] = 100.0 + step
        lines.append(fold.admit("1/1 brokers are down" if step % 2 else "0/1 brokers are down"))
        assert fold.admit(REFUSED) is None
    assert [line for line in lines if line is not None] == ["1/1 brokers are down"]
    now[0] = 161.0
    assert fold.admit(REFUSED) == f"{REFUSED} (and 29 like it in the last 61s)"
    assert fold.admit(REFUSED) is None
    assert fold.admit("Broker: Not enough replicas") == "Broker: Not enough replicas"


def test_filter_drops_repeated_records(caplog):
    logger = logging.getLogger("test.kafkalog")
    logger.addFilter(FoldFilter())
    with caplog.at_level(logging.INFO, logger="test.kafkalog"):
        for _ in range(50):
            logger.warning("%s", REFUSED)
    assert [r.getMessage() for r in caplog.records] == [REFUSED]
