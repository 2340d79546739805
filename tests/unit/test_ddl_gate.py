"""The relay's wait for the operator's decision on a DDL (pgshovel2.relay.ddl.gate), with a store
that keeps the relay records in a dict (the ZooKeeper side is tested in test_ddl_remedies.py)."""

import threading

import pytest

from pgshovel2.errors import StopRequestedError
from pgshovel2.relay.ddl.gate import DECISION, STOP, DdlGate, matches, stop_record


class Records:
    """ClusterStore's relay-record methods over a dict; decisions appear after `after` reads."""

    def __init__(self, decision: dict | None = None, after: int = 0):
        self.records: dict[str, dict] = {}
        self.pending, self.after, self.reads = decision, after, 0

    def get_relay_record(self, name: str, key: str) -> dict | None:
        if key == DECISION:
            self.reads += 1
            if self.pending is not None and self.reads > self.after:
                self.records[DECISION] = self.pending
        return self.records.get(key)

    def put_relay_record(self, name: str, key: str, record: dict) -> None:
        self.records[key] = record

    def delete_relay_record(self, name: str, key: str) -> None:
        self.records.pop(key, None)


STOP_AT = stop_record('"s"."t"', "ALTER ...", "a reason", False, "00000000000000000007:0000000003", 9, 7, 3,
                      "message")


def decision(mode: str = "schema", position: str = STOP_AT["position"]) -> dict:
    return {"table": '"s"."t"', "position": position, "mode": mode, "by": "me", "at": 0}


def test_a_decision_made_while_no_relay_waited_applies_at_once_and_clears_the_stop():
    store = Records(decision())
    store.records[STOP] = STOP_AT  # left by a relay that waited, then stopped
    assert DdlGate(store, "set1", poll=0.01).decide(STOP_AT)["mode"] == "schema"
    assert STOP not in store.records


def test_the_relay_records_where_it_waits_until_the_decision_comes():
    store = Records(decision("new-topic"), after=3)
    assert DdlGate(store, "set1", poll=0.01).decide(STOP_AT)["mode"] == "new-topic"
    assert store.reads == 4 and STOP not in store.records


def test_a_stop_request_ends_the_wait_and_the_stop_stays_recorded():
    stop = threading.Event()
    stop.set()
    store = Records()
    with pytest.raises(StopRequestedError, match="waits there again"):
        DdlGate(store, "set1", stop, poll=0.01).decide(STOP_AT)
    assert store.records[STOP] == STOP_AT


def test_a_decision_covers_only_its_change_and_a_key_change_only_with_a_new_topic():
    assert matches(decision(), STOP_AT)
    assert not matches(decision(position="00000000000000000008:0000000000"), STOP_AT)
    key_stop = {**STOP_AT, "key_change": True}
    assert not matches(decision("schema"), key_stop) and matches(decision("new-topic"), key_stop)
    assert not matches(None, STOP_AT)
