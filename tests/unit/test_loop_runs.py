"""The relay loop (pgshovel2.relay.loop) over ChangeRuns against the same stream as single Changes:
each topic gets the same messages in the same order, BEGIN and END records included, whether a
transaction's changes come as runs the native lane takes (its first change too: the loop then
writes BEGIN after the lane's messages) or one Change at a time. Records are our output plugin's
(RecordDecoder), the emitter and codecs the real ones; the source and sink are the fakes of
test_relay_loop.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import random
import struct
import threading
from collections import defaultdict

import pytest

from pgshovel2.codec import native
from pgshovel2.relay.logical.records import RecordDecoder
from pgshovel2.relay.source import Change, Idle
from pgshovel2.wire import Position
from tests.unit.test_lane import record
from tests.unit.test_relay_loop import TAG, FakeSink, FakeSource, assert_transactions_whole, run

LSN0 = 0x2_0000_0000


def transactions(seed: int, count: int) -> list[tuple[int, int, list[bytes]]]:
    """(txid, commit LSN, change records) of count transactions of 1..5 changes of TABLE."""
    rng = random.Random(seed)
    out, lsn = [], LSN0
    for n in range(count):
        records = []
        for _ in range(rng.choice([1, 1, 2, 2, 3, 5])):
            key = rng.randint(1, 50)
            lsn += 40
            records.append(record(rng.choice("IUD"), 0, [key, f"v{key}-{n}"], lsn=lsn))
        lsn += 100
        out.append((1000 + n, lsn, records))
    return out


class PluginSource(FakeSource):
    """The logical source's items for transactions: Begin, the changes (ChangeRuns of at most
    size records, or Changes when size is 0), Commit, each transaction a unit of its own."""

    def __init__(self, txns: list[tuple[int, int, list[bytes]]], size: int, stop: threading.Event):
        super().__init__([], "txn", stop)
        self.txns, self.size = txns, size

    def items(self, position):
        dec = RecordDecoder([TAG], "slot", raw_rows=True)
        for txid, commit_lsn, records in self.txns:
            yield dec.decode(b"B" + struct.pack(">QQq", commit_lsn, txid, 1_000_000))
            if self.size:
                for start in range(0, len(records), self.size):
                    chunk = records[start:start + self.size]
                    assert all(dec.lane_record(r) for r in chunk)
                    yield dec.run(chunk)
            else:
                for data in records:
                    item = dec.decode(data)
                    assert type(item) is Change
                    yield item
            yield dec.decode(b"C" + struct.pack(">QQI", commit_lsn, commit_lsn + 8, len(records)))
        last = self.txns[-1][1]
        while True:
            if self.acked is not None and self.acked.reaches(last, 0, True):
                self.stop.set()
            yield Idle(0.0)

    def ack(self, position: Position) -> None:
        self.acked = position


def per_topic(sink: FakeSink) -> dict[str, list[tuple]]:
    out = defaultdict(list)
    for message in sink.committed:
        out[message[0]].append(message)
    return dict(out)


@pytest.mark.parametrize("size", [1, 2, 512])
def test_change_runs_give_each_topic_what_single_changes_give(size):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    txns = transactions(7, 60)
    want_sink, got_sink = FakeSink(), FakeSink()
    run(PluginSource(txns, 0, threading.Event()), want_sink)
    run(PluginSource(txns, size, threading.Event()), got_sink)
    want, got = per_topic(want_sink), per_topic(got_sink)
    assert got.keys() == want.keys()
    for topic in want:
        if topic.endswith("positions"):
            continue  # where the Kafka transactions end depends on timing
        assert got[topic] == want[topic], topic
    assert_transactions_whole(got_sink)
    assert len(got_sink.txn_records()) == 2 * len(txns)
