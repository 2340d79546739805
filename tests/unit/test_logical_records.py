"""The relay's reading of pgshovel2_decoder records (sql/decoder/README.rst), positions and
the logical backend's replica identity rules, without a server."""

import random
import struct

import pytest

from pgshovel2.backends.logical import _identity_problem
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import native
from pgshovel2.config import SetConfig, TableConfig
from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.records import PackReader, RecordDecoder, records
from pgshovel2.relay.logical.runs import PG_EPOCH_US
from pgshovel2.relay.source import Begin, Change, Commit
from pgshovel2.setrecord import slot_name
from pgshovel2.wire import LOGICAL, Lsn, change_header, parse_header, snapshot_header


def source() -> RecordDecoder:
    src = RecordDecoder(['"s"."a"', '"s"."b"'], "slot")
    src.last_lsn = 0x1_0000_0000  # the slot's confirmed position when streaming started
    return src


def change(op: bytes, lsn: int, index: int, flags: int, new: bytes, old: bytes = b"") -> bytes:
    return op + struct.pack(">QHBI", lsn, index, flags, len(new)) + new + old


def test_transaction_records_decode_in_order():
    src = source()
    commit_ts_us = 1_000_007  # 2000-01-01 00:00:01.000007 UTC
    records = [
        b"B" + struct.pack(">QQq", 0x1_0000_0010, (3 << 32) | 77, commit_ts_us),
        change(b"I", 0x1_0000_0001, 1, 0, b'[1,"x"]'),
        change(b"U", 0x1_0000_0002, 0, 1, b'[2,"y"]', b"[1,null]"),
        change(b"D", 0x1_0000_0003, 0, 2, b""),
        b"T" + struct.pack(">QH", 0x1_0000_0004, 1),
        b"C" + struct.pack(">QQI", 0x1_0000_0010, 0x1_0000_0040, 4),
        b"H" + struct.pack(">Q", 0x1_0000_0050),
        b"B" + struct.pack(">QQq", 0x1_0000_0090, (3 << 32) | 78, commit_ts_us),
        b"C" + struct.pack(">QQI", 0x1_0000_0090, 0x1_0000_00A0, 0),
        b"B" + struct.pack(">QQq", 0x1_0000_00B0, (3 << 32) | 79, commit_ts_us),
    ]
    got = [src.decode(r) for r in records]
    ts_us = commit_ts_us + PG_EPOCH_US
    ts_ms = ts_us // 1000
    txid, unit = (3 << 32) | 77, 0x1_0000_0010
    heartbeat = got.pop(6)
    assert got == [
        Begin(txid, ts_ms, unit, 0, ts_us, 0x1_0000_0000),
        Change(txid, ts_ms, "I", [1, "x"], '"s"."b"', None, unit, 0, 0x1_0000_0001),
        Change(txid, ts_ms, "U", [2, "y"], '"s"."a"', [1, None], unit, 1, 0x1_0000_0002),
        Change(txid, ts_ms, "D", None, '"s"."a"', None, unit, 2, 0x1_0000_0003),
        Change(txid, ts_ms, "T", None, '"s"."b"', None, unit, 3, 0x1_0000_0004),
        Commit(txid, ts_ms, unit, 4, True),
        Begin(txid + 1, ts_ms, 0x1_0000_0090, 0, ts_us, 0x1_0000_0050),  # after the heartbeat
        Commit(txid + 1, ts_ms, 0x1_0000_0090, 0, True),
        Begin(txid + 2, ts_ms, 0x1_0000_00B0, 0, ts_us, 0x1_0000_00A0),  # after the last transaction
    ]
    assert (heartbeat.txid, heartbeat.unit, heartbeat.complete) == (None, 0x1_0000_0050, True)
    assert list(src.ends) == [(unit, 0x1_0000_0040), (0x1_0000_0050, 0x1_0000_0050),
                              (0x1_0000_0090, 0x1_0000_00A0)]
    assert (ts_ms, ts_us) == (946_684_801_000, 946_684_801_000_007)


def pack(*recs: bytes) -> bytes:
    return b"P" + b"".join(struct.pack(">I", len(r)) + r for r in recs)


class _Msg:
    def __init__(self, payload: bytes, data_start: int):
        self.payload, self.data_start = payload, data_start


def test_a_pack_gives_its_records_in_order_as_messages_with_its_start():
    """PackReader opens a pack (format 4) into one message per record, each with the pack's
    XLogData start; other messages pass as they came; feed takes a whole pack too."""
    begin = b"B" + struct.pack(">QQq", 0x1_0000_0010, 77, 5)
    ins = change(b"I", 0x1_0000_0001, 1, 0, b'[1,"x"]')
    empty = change(b"D", 0x1_0000_0002, 0, 2, b"")
    commit = b"C" + struct.pack(">QQI", 0x1_0000_0010, 0x1_0000_0040, 2)
    heartbeat = b"H" + struct.pack(">Q", 0x1_0000_0050)
    stream = [_Msg(pack(begin, ins, empty), 0x1_0000_0002), _Msg(pack(commit), 0x1_0000_0040),
              _Msg(heartbeat, 0x1_0000_0050), None]
    reader = PackReader(lambda: stream.pop(0))
    got = [(m.payload, m.data_start) for m in iter(reader.read, None)]
    assert got == [(begin, 0x1_0000_0002), (ins, 0x1_0000_0002), (empty, 0x1_0000_0002),
                   (commit, 0x1_0000_0040), (heartbeat, 0x1_0000_0050)]
    assert records(pack(begin, ins)) == [begin, ins] and records(heartbeat) == [heartbeat]
    assert [type(i).__name__ for i in source().feed(pack(begin, ins, empty, commit), 0)] == [
        "Begin", "Change", "Change", "Commit"]


def test_a_pack_cut_inside_a_record_is_an_error():
    whole = pack(change(b"I", 1, 0, 0, b"[1]"))
    with pytest.raises(RelayError, match="ends inside a record"):
        records(whole[:-1])


def test_the_native_pack_reader_gives_what_the_python_one_gives():
    """Random streams of packs (records of 0 to 300 bytes, empty packs, other messages, pauses)
    and cut packs: both readers give the same messages and stop with the same error."""
    mod = native.module()
    assert mod is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    readers = {"python": lambda read: PackReader(read).read,
               "native": lambda read: mod.PackReader(read, RelayError).read}
    rng = random.Random(5)
    for _ in range(200):
        stream: list = []
        for i in range(rng.randint(1, 12)):
            recs = [bytes([rng.choice(b"BIUDTCRV")]) + rng.randbytes(rng.randint(0, 300))
                    for _ in range(rng.randint(0, 6))]
            kind = rng.random()
            payload = pack(*recs) if kind < 0.7 else b"H" + rng.randbytes(8)
            if kind < 0.1:
                payload = payload[:rng.randint(1, len(payload))]  # cut, perhaps inside a length
            stream.append(_Msg(payload, 1000 + i))
            if rng.random() < 0.2:
                stream.append(None)
        got = {}
        for name, make in readers.items():
            msgs, out = list(stream), []
            read = make(lambda msgs=msgs: msgs.pop(0) if msgs else None)
            try:
                while msgs or out[-1:] != [None]:
                    m = read()
                    out.append(None if m is None else (m.payload, m.data_start))
            except RelayError as exc:
                out.append(str(exc))
            got[name] = out
        assert got["native"] == got["python"]


def test_unchanged_update_of_a_column_subset_is_dropped_but_counted():
    src = source()
    src.subset_tags.add('"s"."a"')
    src.decode(b"B" + struct.pack(">QQq", 0x20, 5, 0))
    assert src.decode(change(b"U", 0x21, 0, 1, b"[1,2]", b"[1,2]")) is None
    assert src.decode(change(b"U", 0x22, 0, 1, b"[1,3]", b"[1,2]")).ordinal == 1


def test_unknown_record_is_an_error():
    with pytest.raises(Exception, match="unknown record"):
        source().decode(b"Z")


def test_lsn_forms_and_positions_sort():
    assert Lsn.parse("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert str(Lsn.parse("16/B374D848")) == "16/B374D848"
    positions = [snapshot_header(LOGICAL, 0x100, 5), change_header(LOGICAL, 0x101, 0),
                 change_header(LOGICAL, 0x101, 9), change_header(LOGICAL, 0xF_0000_0000, 0)]
    assert positions == sorted(positions)
    assert parse_header(positions[2]) == (LOGICAL, 0x101, False, 9)
    assert parse_header(positions[0]) == (LOGICAL, 0x100, True, 5)
    with pytest.raises(ValueError, match="malformed"):
        Lsn.parse("16B374D848")


def test_slot_names_are_valid_and_distinct():
    a, b = slot_name("c1", "Set"), slot_name("c1", "set")
    assert a != b and a == a.lower() and len(slot_name("c" * 60, "s" * 40)) <= 63


def _table(key: tuple[str, ...]) -> Table:
    cols = (Column("id", 1, "integer", "int4", False, False), Column("n", 2, "integer", "int4", False, True))
    return Table("s", "t", cols, key, "primary key")


# Unchanged, unlogged values need no FULL in either encoding: their columns are nullable
# (pgshovel2.backends.logical.unlogged_nullable, tests/integration/test_logical.py).
@pytest.mark.parametrize("ident, ident_cols, envelope, key, problem, encoding", [
    ("d", {"id"}, "row", ("id",), None, "avro"),
    ("f", set(), "debezium", ("id",), None, "avro"),
    ("n", {"id"}, "row", ("id",), "NOTHING", "avro"),
    ("d", {"id"}, "row", ("id",), None, "json"),
    ("d", {"id"}, "debezium", ("id",), None, "avro"),  # as Debezium: before holds the key only
    ("i", {"id", "n"}, "debezium", ("id",), None, "json"),
    ("n", set(), "debezium", ("id",), "NOTHING", "json"),
    ("d", set(), "debezium", (), "REPLICA IDENTITY FULL", "json"),
    ("i", {"n"}, "row", ("id",), "its key (id)", "avro"),
    ("d", set(), "row", (), "no key (allow_unkeyed)", "avro"),  # unkeyed: FULL only (issue #66)
    ("i", {"n"}, "row", (), "replica identity is USING INDEX", "json"),
    ("n", set(), "row", (), "REPLICA IDENTITY FULL", "avro"),
])
def test_replica_identity_rules(ident, ident_cols, envelope, key, problem, encoding):
    config = SetConfig(dsn="x", tables=(TableConfig("s", "t"),), backend="logical", envelope=envelope,
                       encoding=encoding)
    got = _identity_problem(_table(key), config, ident, ident_cols)
    assert (got is None) if problem is None else (problem in got)


def test_unchanged_values_are_listed_after_the_new_row():
    """Flag 4 (record format 3): uint16 count and positions after the new row, before the old row."""
    src = source()
    src.decode(b"B" + struct.pack(">QQq", 0x20, 5, 0))
    listed = struct.pack(">HHH", 2, 1, 3)
    got = src.decode(change(b"U", 0x21, 0, 4, b"[1,null,7,null]", listed))
    assert (got.row, got.unchanged, got.before) == ([1, None, 7, None], (1, 3), None)
    got = src.decode(change(b"U", 0x22, 0, 4 | 1, b"[2,null]", struct.pack(">HH", 1, 1) + b"[1,null]"))
    assert (got.row, got.unchanged, got.before) == ([2, None], (1,), [1, None])
    assert src.decode(change(b"U", 0x23, 0, 0, b"[1,2]")).unchanged == ()
