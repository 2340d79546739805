"""The read-ahead worker: order, bounded read-ahead, errors, early close."""

import threading
import time

import pytest

from pgshovel2.relay.pgq.prefetch import prefetch


def test_items_arrive_in_order_from_another_thread():
    threads = set()

    def chunks():
        for i in range(100):
            threads.add(threading.current_thread().name)
            yield [i]

    assert [c[0] for c in prefetch(chunks())] == list(range(100))
    assert threads == {"prefetch"}


def test_worker_stays_at_most_depth_ahead_and_stops_on_close():
    made = []
    closed = threading.Event()

    def chunks():
        try:
            for i in range(1000):
                made.append(i)
                yield i
        finally:
            closed.set()

    it = prefetch(chunks(), depth=2)
    assert next(it) == 0
    time.sleep(0.3)
    assert len(made) <= 4  # the one taken, two queued, one waiting to be queued
    it.close()
    assert closed.wait(5)
    assert len(made) <= 4


def test_worker_error_is_raised_to_the_consumer():
    def chunks():
        yield 1
        raise ValueError("broken fetch")

    it = prefetch(chunks())
    assert next(it) == 1
    with pytest.raises(ValueError, match="broken fetch"):
        next(it)
