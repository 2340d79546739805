"""The relay's native lane (pgshovel2.relay.lane) against the per-change path: the same change
records of our output plugin give the same messages, headers (in order) and END counts whether
they are taken one Change at a time (RecordDecoder.decode, Emitter.change) or as ChangeRuns
(RecordDecoder.run, Emitter.change_run, with the records the lane leaves taken one at a time as
the relay loop does). Random rows of every WIRE.md type, JSON and Avro, key moves, tables the
lane does not take, rows it leaves to Python (arrays).

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random
import struct

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import native
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.errors import EncodeError
from pgshovel2.relay.emitter import Emitter, TableRoute
from pgshovel2.relay.record_decoder import RecordDecoder
from pgshovel2.wire import LOGICAL, change_header_at, position_prefix
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


def record(op: str, index: int, row: list, old: list | None = None) -> bytes:
    """A change record of the plugin (format 3): row and old row as JSON text."""
    new = json.dumps(row).encode()
    flags = 1 if old is not None else 0
    return (op.encode() + struct.pack(">QHBI", UNIT + 1, index, flags, len(new)) + new
            + (json.dumps(old).encode() if old is not None else b""))


def workload(seed: int, data: list[list]) -> list[bytes]:
    """Change records over data's rows: inserts, updates with and without the old row (the same
    key, or a key move), deletes, and now and then a change of the unkeyed table."""
    rng = random.Random(seed)
    out = []
    for row in data:
        kind = rng.choice(["I", "I", "U", "Uold", "Umove", "D", "loose"])
        if kind == "loose":
            out.append(record(rng.choice("IUD"), 1, ["x" * rng.randint(0, 3)]))
        elif kind == "Uold":
            out.append(record("U", 0, row, row))
        elif kind == "Umove":
            out.append(record("U", 0, row, [row[0] + 10_000, *row[1:]]))
        else:
            out.append(record(kind[0], 0, row))
    return out


def takes(records: list[bytes], enc: RowEncoder) -> int:
    """The records the lane must take: the keyed table's, whose rows (and old rows) the native
    codec encodes."""
    dec = RecordDecoder(["k", "u"], "slot", raw_rows=True)
    changes = [dec.decode(r) for r in records]
    return sum(1 for c in changes if c.table == "k" and enc.encode_native(c.row) is not None
               and (c.before is None or enc.encode_native(c.before) is not None))


def emitter(use_avro: bool, tbl: Table) -> tuple[Emitter, ListSink]:
    sink = ListSink()
    routes = {tbl.qualified: TableRoute(tbl, "topic.t", encoders(tbl, use_avro, "row")),
              UNKEYED.qualified: TableRoute(UNKEYED, "topic.u", RowEncoder(UNKEYED, False))}
    em = Emitter("myset", routes, "txns", None, sink)
    em.version = 3
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


def one_by_one(records: list[bytes], use_avro: bool, tbl: Table):
    em, sink = emitter(use_avro, tbl)
    dec, prefix = decoder(tbl), position_prefix(LOGICAL, UNIT)
    for data in records:
        relay_change(em, sink, dec.decode(data), prefix)
    return sink.produced, dict(em._counts), em.skipped_unkeyed_deletes


def in_runs(records: list[bytes], use_avro: bool, tbl: Table, size: int):
    """What the loop does with ChangeRuns of at most size records; also the records the lane took."""
    em, sink = emitter(use_avro, tbl)
    dec, prefix = decoder(tbl), position_prefix(LOGICAL, UNIT)
    laned = 0
    for start in range(0, len(records), size):
        assert all(dec.lane_record(r) for r in records[start:start + size])
        run = dec.run(records[start:start + size])
        i = 0
        while i < len(run.records):
            done = em.change_run(run, i, prefix)
            laned += done
            if not done:
                (change,) = run.expand(run, i, i + 1)
                relay_change(em, sink, change, prefix)
                done = 1
            i += done
    return (sink.produced, dict(em._counts), em.skipped_unkeyed_deletes), laned


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
@pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])
def test_runs_through_the_lane_equal_changes_one_by_one(use_avro, arrays):
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    records = workload(5, rows(21, 400, True, types))
    want = one_by_one(records, use_avro, tbl)
    for size in (1, 7, 512):
        got, laned = in_runs(records, use_avro, tbl, size)
        assert got == want, size
        assert laned == takes(records, encoders(tbl, use_avro, "row")), size
    assert arrays or takes(records, encoders(tbl, use_avro, "row")) > len(records) // 3


def test_a_run_of_a_table_outside_the_set_is_refused_as_one_change_is():
    tbl = table(False, TYPES[:3])
    dec = RecordDecoder(['"s"."gone"'], "slot", raw_rows=True)
    dec.decode(b"B" + struct.pack(">QQq", UNIT, TXID, 0))
    run = dec.run([record("I", 0, [1, True, 2, 3])])
    em, sink = emitter(False, tbl)
    assert em.change_run(run, 0, position_prefix(LOGICAL, UNIT)) == 0  # left to Emitter.change, which raises
    assert sink.produced == []


def test_lane_records_exclude_unchanged_values_and_subset_tables():
    tbl = table(False, TYPES[:3])
    dec = decoder(tbl)
    plain = record("U", 0, [1, True, 2, 3])
    unchanged = b"U" + struct.pack(">QHBI", UNIT, 0, 4, 2) + b"[]" + struct.pack(">HH", 1, 2)
    assert dec.lane_record(plain) and not dec.lane_record(unchanged)
    assert not dec.lane_record(b"C" + bytes(20))
    dec.subset_tags = {tbl.qualified}
    assert not dec.lane_record(plain)
