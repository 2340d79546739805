"""The relay's native lane (pgshovel2.relay.emit.lane) against the per-change path: the same change
records of our output plugin give the same messages, headers (in order) and END counts whether
they are taken one Change at a time (RecordDecoder.decode, Emitter.change) or as ChangeRuns
(RecordDecoder.run, Emitter.change_run, with the records the lane leaves taken one at a time as
the relay loop does). Random rows of every WIRE.md type, JSON and Avro, the row and the debezium
envelope (whose events must also be numbered, and stamped by a clock that moves on every call, as
the per-change path would), key moves, tables the lane does not take, rows it leaves to Python
(arrays).

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random
import struct

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, native
from pgshovel2.errors import EncodeError
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.logical.records import RecordDecoder
from pgshovel2.relay.pgq import runs as pgq_runs
from pgshovel2.relay.source import Change, ChangeRun
from pgshovel2.wire import LOGICAL, TRIGGER, change_header_at, position_prefix
from tests.unit.test_debezium_native import Clock
from tests.unit.test_native_codec import ARRAYS, TYPES, encoders, rows, table

UNIT = 0x1_0000_0010
TXID = (3 << 32) | 77
UNKEYED = Table("s", "loose", (Column("v", 1, "text", "text", False, True),), (), "none")


class ListSink:
    """Collects produced messages with their headers as given (a list, in order)."""

    def __init__(self):
        self.produced = []

    def produce(self, topic, key, value, headers):
        self.produced.append((topic, key, value, list(headers)))

    def produce_many(self, messages):
        for topic, key, value, headers in messages:
            self.produce(topic, key, value, headers)


def every_form(test):
    """test over the axes of the lane's differential tests: envelope (row, debezium), use_avro
    (avro, json) and arrays (scalars, with-arrays)."""
    test = pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])(test)
    test = pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])(test)
    return pytest.mark.parametrize("envelope", ["row", "debezium"])(test)


def record(op: str, index: int, row: list, old: list | None = None, lsn: int = UNIT + 1) -> bytes:
    """A change record of the plugin (format 3) at change LSN lsn: row and old row as JSON text."""
    new = json.dumps(row).encode()
    flags = 1 if old is not None else 0
    return (op.encode() + struct.pack(">QHBI", lsn, index, flags, len(new)) + new
            + (json.dumps(old).encode() if old is not None else b""))


def workload(seed: int, data: list[list], bare: float = 0.1) -> list[bytes]:
    """Change records over data's rows: inserts, updates with and without the old row (the same
    key, or a key move), deletes, and now and then a change of the unkeyed table (bare: the share
    of its UPDATEs without their old row, which Emitter.change refuses)."""
    rng = random.Random(seed)
    out = []
    for n, row in enumerate(data):
        kind, lsn = rng.choice(["I", "I", "U", "Uold", "Umove", "D", "loose"]), UNIT - 9000 + 24 * n
        if kind == "loose":  # an UPDATE mostly with its old row (one without is refused: EncodeError)
            op, old = rng.choice("IUUD"), ["y" * rng.randint(0, 3)] if rng.random() >= bare else None
            out.append(record(op, 1, ["x" * rng.randint(0, 3)], old if op == "U" else None, lsn=lsn))
        elif kind == "Uold":
            out.append(record("U", 0, row, row, lsn=lsn))
        elif kind == "Umove":
            out.append(record("U", 0, row, [row[0] + 10_000, *row[1:]], lsn=lsn))
        else:
            out.append(record(kind[0], 0, row, lsn=lsn))
    return out


def takes(records: list[bytes], tbl: Table, use_avro: bool, envelope: str) -> int:
    """The records the lane must take: the keyed table's, whose rows (and old rows) the native
    codec of its envelope encodes, and in the row envelope the unkeyed table's (null keys) but an
    UPDATE without its old row (Python's, which refuses it)."""
    dec = RecordDecoder(["k", "u"], "slot", raw_rows=True)
    changes = [dec.decode(r) for r in records]
    env = route(tbl, "topic.t", use_avro, envelope).envelope
    encode = env.encoder.encode_native if envelope == "row" else lambda row: env._native.encode(row, True)
    keyed = sum(1 for c in changes if c.table == "k" and encode(c.row) is not None
                and (c.before is None or encode(c.before) is not None))
    return keyed + (sum(1 for c in changes if c.table == "u" and (c.op != "U" or c.before is not None))
                    if envelope == "row" else 0)


def route(tbl: Table, topic: str, use_avro: bool, envelope: str, clock=None) -> TableRoute:
    """tbl's route in envelope (row or debezium), Avro or JSON; debezium: clock, else a Clock of its own."""
    enc = encoders(tbl, use_avro, envelope)
    if envelope == "row":
        return TableRoute(tbl, topic, enc)
    writer = avro.AvroWriter(avro.debezium_value_schema("myset", tbl), 8) if use_avro else None
    return TableRoute(tbl, topic, enc, DebeziumEnvelope(enc, SourceInfo("myset", "db", tbl.schema, tbl.name),
                                                        topic, writer, clock=clock or Clock()))


def emitter(use_avro: bool, tbl: Table, envelope: str = "row", logical: bool = True) -> tuple[Emitter, ListSink]:
    """An emitter of tbl and UNKEYED (JSON) in envelope, in the transaction of decoder(tbl)
    (logical: with the commit µs and last LSN the logical backend's Begin gives)."""
    sink = ListSink()
    routes = {tbl.qualified: route(tbl, "topic.t", use_avro, envelope),
              UNKEYED.qualified: route(UNKEYED, "topic.u", False, envelope)}
    em = Emitter("myset", routes, "txns", None, sink)
    em.version = 3
    if logical:
        em.begin(TXID, position_prefix(LOGICAL, UNIT), 1_000, ts_us=1_000_007, last_lsn=UNIT - 10_000)
    else:
        em.begin(TXID, position_prefix(TRIGGER, UNIT), 1_000)
    return em, sink


def decoder(tbl: Table) -> RecordDecoder:
    dec = RecordDecoder([tbl.qualified, UNKEYED.qualified], "slot", raw_rows=True)
    dec.decode(b"B" + struct.pack(">QQq", UNIT, TXID, 1_000_007))
    return dec


def relay_change(em: Emitter, sink: ListSink, change, prefix: str) -> None:
    """Emitter.change, an EncodeError noted in the sink (the loop would stop or skip there)."""
    try:
        em.change(change, change_header_at(prefix, change.ordinal))
    except EncodeError as exc:
        sink.produced.append(("EncodeError", change.ordinal, str(exc)))


def relay_run(em: Emitter, sink: ListSink, run: ChangeRun, prefix: str) -> int:
    """What the relay loop does with a ChangeRun: the lane as far as it goes, a record it leaves
    through Emitter.change, and on; returns how many records the lane took."""
    i = laned = 0
    while i < len(run.records):
        done = em.change_run(run, i, prefix)
        laned += done
        if not done:
            (change,) = run.expand(run, i, i + 1)
            relay_change(em, sink, change, prefix)
            done = 1
        i += done
    return laned


def one_by_one(records: list[bytes], use_avro: bool, tbl: Table, envelope: str):
    em, sink = emitter(use_avro, tbl, envelope)
    dec, prefix = decoder(tbl), position_prefix(LOGICAL, UNIT)
    for data in records:
        relay_change(em, sink, dec.decode(data), prefix)
    return sink.produced, dict(em._counts), em._order.total


def in_runs(records: list[bytes], use_avro: bool, tbl: Table, envelope: str, size: int):
    """What the loop does with ChangeRuns of at most size records; also the records the lane took."""
    em, sink = emitter(use_avro, tbl, envelope)
    dec, prefix = decoder(tbl), position_prefix(LOGICAL, UNIT)
    laned = 0
    for start in range(0, len(records), size):
        assert all(dec.lane_record(r) for r in records[start:start + size])
        laned += relay_run(em, sink, dec.run(records[start:start + size]), prefix)
    return (sink.produced, dict(em._counts), em._order.total), laned


@every_form
def test_runs_through_the_lane_equal_changes_one_by_one(use_avro, arrays, envelope):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    records = workload(5, rows(21, 400, True, types))
    want = one_by_one(records, use_avro, tbl, envelope)
    for size in (1, 7, 512):
        got, laned = in_runs(records, use_avro, tbl, envelope, size)
        assert got == want, size
        assert laned == takes(records, tbl, use_avro, envelope), size
    assert arrays or takes(records, tbl, use_avro, envelope) > len(records) // 3


def test_a_run_of_a_table_outside_the_set_is_refused_as_one_change_is():
    tbl = table(False, TYPES[:3])
    dec = RecordDecoder(['"s"."gone"'], "slot", raw_rows=True)
    dec.decode(b"B" + struct.pack(">QQq", UNIT, TXID, 0))
    run = dec.run([record("I", 0, [1, True, 2, 3])])
    em, sink = emitter(False, tbl)
    begun = list(sink.produced)
    assert em.change_run(run, 0, position_prefix(LOGICAL, UNIT)) == 0  # left to Emitter.change, which raises
    assert sink.produced == begun


def test_lane_records_exclude_unchanged_values_and_subset_tables():
    tbl = table(False, TYPES[:3])
    dec = decoder(tbl)
    plain = record("U", 0, [1, True, 2, 3])
    unchanged = b"U" + struct.pack(">QHBI", UNIT, 0, 4, 2) + b"[]" + struct.pack(">HH", 1, 2)
    assert dec.lane_record(plain) and not dec.lane_record(unchanged)
    assert not dec.lane_record(b"C" + bytes(20))
    dec.subset_tags = {tbl.qualified}
    assert not dec.lane_record(plain)


def trigger_rows(records: list[bytes], tbl: Table) -> list[tuple]:
    """The PgQ event rows (txid, ts_ms, op, data, table, extra) the capture trigger would queue for
    the changes of records (rows as text; an empty extra now and then, which means none)."""
    dec = decoder(tbl)
    out = []
    for n, change in enumerate(dec.decode(r) for r in records):
        extra = change.before.decode() if change.before is not None else ("" if n % 5 == 0 else None)
        out.append((TXID, 1_000, change.op, change.row.decode(), change.table, extra))
    return out


def trigger_change(row: tuple, ordinal: int) -> Change:
    """The Change PgqSource._batch gives for a row (raw rows) that does not go in a run."""
    txid, ts_ms, op, data, table, extra = row
    return Change(txid, ts_ms, op, data if data else None, table, extra if extra else None, UNIT, ordinal)


@every_form
def test_trigger_runs_through_the_lane_equal_changes_one_by_one(use_avro, envelope, arrays):
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    rows_ = trigger_rows(workload(9, rows(23, 300, True, types)), tbl)
    prefix = position_prefix(TRIGGER, UNIT)
    em, sink = emitter(use_avro, tbl, envelope, logical=False)
    for ordinal, row in enumerate(rows_):
        relay_change(em, sink, trigger_change(row, ordinal), prefix)
    want = sink.produced, dict(em._counts), em._order.total
    for size in (1, 7, 512):
        em, sink = emitter(use_avro, tbl, envelope, logical=False)
        laned, start = 0, 0
        while start < len(rows_):
            stop = pgq_runs.run_end(rows_[:start + size], start)
            laned += relay_run(em, sink, ChangeRun(TXID, 1_000, UNIT, start, rows_[start:stop], None,
                                                   pgq_runs.expand), prefix)
            start = stop
        assert (sink.produced, dict(em._counts), em._order.total) == want, size
        assert arrays or laned > len(rows_) // 3, size
