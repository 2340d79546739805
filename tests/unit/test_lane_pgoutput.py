"""The relay's native lane for pgoutput (PgoutputDecoder.lane_record / run, pgshovel2.relay.emit.lane)
against the per-change path: the same Insert/Update/Delete messages give the same messages,
headers (in order), END counts and debezium event numbering whether each is fed to the decoder
and relayed as a Change (Emitter.change) or gathered into ChangeRuns as the logical source
gathers them (Emitter.change_run, the records the lane leaves taken one at a time as the relay
loop does). Random rows of every WIRE.md type as PostgreSQL's output functions print them, each
message at its own LSN; old rows as keys ('K') and whole ('O'), key moves, unchanged TOASTed
values (left to Python), arrays of several dimensions or with bounds (left to Python).

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import random
import struct

from pgshovel2.codec import native
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder
from pgshovel2.relay.logical.runs import PG_EPOCH_US
from pgshovel2.relay.source import Begin, Change
from pgshovel2.wire import LOGICAL, position_prefix
from tests.unit.test_lane import TXID, UNIT, emitter, every_form, relay_change, relay_run, route
from tests.unit.test_native_codec import ARRAYS, TYPES
from tests.unit.test_native_pgoutput import MORE_ARRAYS, OID, decoder, message, table

PREFIX = position_prefix(LOGICAL, UNIT)


def in_transaction(tbl, monkeypatch) -> PgoutputDecoder:
    """A native decoder of tbl's relation in a transaction (txid TXID, commit time 1,000,007 µs)
    whose first change is still to come."""
    dec = decoder(tbl, False, monkeypatch)
    dec.feed(b"C" + struct.pack(">BQQq", 0, 0x90, 0x98, 0), 0x98)
    dec.set_xid_reference(TXID)
    dec.feed(b"B" + struct.pack(">QqI", UNIT, 1_000_007 - PG_EPOCH_US, TXID & 0xFFFFFFFF), UNIT - 10_000)
    return dec


def messages(seed: int, tbl, count: int) -> list[tuple[bytes, int]]:
    """(message, XLogData start) of random I/U/D messages of tbl, each at its own LSN; some
    updates move the key (their 'K'/'O' old row holds another id)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        data, _ = message(rng, tbl, n + 1, odd=0)
        if data[:1] == b"U" and data[5:6] in (b"K", b"O") and rng.random() < 0.3:
            moved = str(n + 100_000).encode()
            # the old tuple's first column, the id: kind 't' at 8, its length at 9..13, its text after
            data = data[:9] + struct.pack(">I", len(moved)) + moved + data[13 + len(str(n + 1)):]
        out.append((data, UNIT - 9000 + 24 * n))
    return out


def takes(msgs, tbl, use_avro: bool, envelope: str, monkeypatch) -> int:
    """The messages the lane must take: those whose rows the native decoder gives without
    unchanged values and the envelope's native codec encodes (the old row too), the transaction's
    first (which opens it) included."""
    dec = in_transaction(tbl, monkeypatch)
    env = route(tbl, "topic.t", use_avro, envelope).envelope
    encode = env.encoder.encode_native if envelope == "row" else lambda row: env._native.encode(row, True)
    count = 0
    for data, lsn in msgs:
        (change,) = [i for i in dec.feed(data, lsn) if isinstance(i, Change)]
        count += (isinstance(change.row, bytes) and not change.unchanged and encode(change.row) is not None
                  and (change.before is None or encode(change.before) is not None))
    return count


def relay_items(em, sink, items) -> None:
    for item in items:
        if isinstance(item, Change):
            relay_change(em, sink, item, PREFIX)


def one_by_one(msgs, tbl, use_avro: bool, envelope: str, monkeypatch):
    dec = in_transaction(tbl, monkeypatch)
    em, sink = emitter(use_avro, tbl, envelope)
    for data, lsn in msgs:
        relay_items(em, sink, dec.feed(data, lsn))
    return sink.produced, dict(em._counts), em._order.total


def in_runs(msgs, tbl, use_avro: bool, envelope: str, size: int, monkeypatch):
    """What the logical source and the loop do: messages the lane may take gathered into runs of
    at most size, the others fed one by one. Also returns the records the lane took."""
    dec = in_transaction(tbl, monkeypatch)
    em, sink = emitter(use_avro, tbl, envelope)
    pending, laned, opened = [], 0, []

    def flush() -> int:
        opening = dec.opening()
        assert [type(i) for i in opening] == ([Begin] if pending and not opened else []), opening
        opened.append(bool(pending))
        taken = relay_run(em, sink, dec.run(list(pending)), PREFIX) if pending else 0
        pending.clear()
        return taken
    for data, lsn in msgs:
        record = dec.lane_record(data, lsn)
        if record is None:
            laned += flush()
            items = dec.feed(data, lsn)
            opened.append(any(isinstance(i, Begin) for i in items))
            relay_items(em, sink, items)
            continue
        pending.append(record)
        if len(pending) == size:
            laned += flush()
    laned += flush()
    return (sink.produced, dict(em._counts), em._order.total), laned


@every_form
def test_pgoutput_runs_through_the_lane_equal_changes_one_by_one(use_avro, arrays, envelope, monkeypatch):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    tbl = table(TYPES + ARRAYS + MORE_ARRAYS if arrays else TYPES)
    msgs = messages(31 + arrays, tbl, 400)
    want = one_by_one(msgs, tbl, use_avro, envelope, monkeypatch)
    assert len(want[0]) > 300
    must = takes(msgs, tbl, use_avro, envelope, monkeypatch)
    for size in (1, 7, 512):
        got, laned = in_runs(msgs, tbl, use_avro, envelope, size, monkeypatch)
        assert got == want, size
        assert laned == must, size
    assert must > len(msgs) // (20 if arrays else 5), must


def test_lane_records_are_changes_of_mapped_whole_tables_in_a_begun_transaction(monkeypatch):
    tbl = table(TYPES[:3])
    dec = decoder(tbl, False, monkeypatch)
    insert = b"I" + struct.pack(">I", OID) + b"N" + struct.pack(">H", 4) + b"n" * 4
    rows, index, data, lsn, rel = dec.lane_record(insert, 77)
    assert (rows, index, data, lsn, rel.tag) == (dec._relations[OID].native, 0, insert, 77, tbl.qualified)
    assert dec.lane_record(b"T" + bytes(12), 1) is None
    assert dec.lane_record(insert[:1] + struct.pack(">I", OID + 1) + insert[5:], 1) is None  # no Relation yet
    dec.subset_tags = {tbl.qualified}
    assert dec.lane_record(insert, 1) is None
    dec.subset_tags = set()
    dec.feed(b"C" + struct.pack(">BQQq", 0, 0x90, 0x98, 0), 0x98)
    assert dec.lane_record(insert, 1) is None  # no transaction begun
    assert dec.opening() == []
    dec.feed(b"B" + struct.pack(">QqI", 0x80, 0, 5), 0x80)
    assert dec.lane_record(insert, 0x81) is not None  # a transaction's first change opens it
    assert [(type(i), i.unit) for i in dec.opening()] == [(Begin, 0x80)] and dec.opening() == []
    assert dec.lane_record(insert, 0x82) is not None and dec.opening() == []
    dec.feed(b"C" + struct.pack(">BQQq", 0, 0x80, 0x88, 0), 0x88)
    dec.feed(b"R" + struct.pack(">I", OID) + b"s\0t\0d" + struct.pack(">H", 0), 1)
    dec.feed(b"B" + struct.pack(">QqI", 0xA0, 0, 6), 0xA0)
    dec.feed(insert, 0xA1)
    assert dec.lane_record(insert, 0xA2) is None  # a new layout, not settled yet
