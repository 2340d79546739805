"""pgoutput_stream: protocol versions, and what a streamed transaction gives the decoder (messages
built as PostgreSQL's proto.c writes them; the integration tests run it against real servers)."""

import struct

import pytest

from pgshovel2.errors import RelayError
from pgshovel2.relay.logical.pgoutput.stream import StreamAssembler, protocol_version

TOP, SUB_A, SUB_B = 700, 701, 702


def start(xid: int, first: bool) -> bytes:
    return b"S" + struct.pack(">IB", xid, first)


def insert(xid: int, n: int) -> bytes:
    """An Insert inside a stream: type, xid, relation OID, 'N', one text column n."""
    text = str(n).encode()
    return b"I" + struct.pack(">II", xid, 16384) + b"N" + struct.pack(">HcI", 1, b"t", len(text)) + text


def commit(xid: int) -> bytes:
    return b"c" + struct.pack(">IBQQq", xid, 0, 5000, 5100, 123)


def abort(xid: int, subxid: int) -> bytes:
    return b"A" + struct.pack(">II", xid, subxid)


def values(out: list[tuple[bytes, int]]) -> list:
    """The decoder's view: Begin/Commit fields, the inserted numbers."""
    got = []
    for data, lsn in out:
        if data[:1] == b"B":
            got.append(("B", *struct.unpack(">QqI", data[1:])))
        elif data[:1] == b"C":
            got.append(("C", *struct.unpack(">BQQq", data[1:]), lsn))
        else:
            assert data[:1] == b"I" and struct.unpack_from(">I", data, 1) == (16384,)  # xid field gone
            got.append(int(data[13:]))
    return got


def feed(assembler: StreamAssembler, messages: list[bytes]) -> list:
    out = []
    for i, message in enumerate(messages):
        out += list(assembler.route(message, 1000 + i))
    return values(out)


def test_protocol_versions():
    assert [protocol_version(v) for v in (130011, 140018, 150004, 160009, 170005, 180001)] == [1, 2, 3, 4, 4, 4]


def test_streamed_transaction_replays_as_begin_changes_commit(tmp_path):
    assembler = StreamAssembler(str(tmp_path), "slot")
    got = feed(assembler, [start(TOP, True), insert(TOP, 1), insert(TOP, 2), b"E",
                           b"B" + struct.pack(">QqI", 900, 1, 650), b"C" + bytes(25),  # a small one between
                           start(TOP, False), insert(TOP, 3), b"E", commit(TOP)])
    assert got[:1] == [("B", 900, 1, 650)]
    assert got[2:] == [("B", 5000, 123, TOP), 1, 2, 3, ("C", 0, 5000, 5100, 123, 5100)]
    assert not assembler.files and list(tmp_path.iterdir()) == []  # unlinked: nothing left on disk


def test_subtransaction_aborts_truncate_at_their_first_change(tmp_path):
    assembler = StreamAssembler(str(tmp_path), "slot")
    # 1 (top); savepoint a: 2; nested b: 3, released; 4 (a again); rollback to a: a and b aborted
    got = feed(assembler, [start(TOP, True), insert(TOP, 1), insert(SUB_A, 2), insert(SUB_B, 3), b"E",
                           start(TOP, False), insert(SUB_A, 4), b"E", abort(TOP, SUB_B), abort(TOP, SUB_A),
                           start(TOP, False), insert(TOP, 5), b"E", abort(TOP, 999), commit(TOP)])
    assert got[1:-1] == [1, 5]


def test_whole_abort_drops_the_transaction(tmp_path):
    assembler = StreamAssembler(str(tmp_path), "slot")
    assert feed(assembler, [start(TOP, True), insert(TOP, 1), b"E", abort(TOP, TOP)]) == []
    assert not assembler.files


@pytest.mark.parametrize("messages, error", [
    ([start(TOP, False)], "whose start this session never received"),
    ([commit(TOP)], "never received"),
    ([start(TOP, True), b"E", start(TOP, True)], "twice"),
    ([b"E"], "outside a stream block"),
    ([start(TOP, True), b"B" + bytes(20)], "inside the stream block of transaction 700"),
])
def test_protocol_violations_are_named(tmp_path, messages, error):
    with pytest.raises(RelayError, match=error):
        feed(StreamAssembler(str(tmp_path), "slot"), messages)


def test_unwritable_spill_dir_is_named(tmp_path):
    with pytest.raises(RelayError, match="cannot create a spill file for streamed transaction 700 in /nonexistent"):
        feed(StreamAssembler("/nonexistent/spill", "slot"), [start(TOP, True)])
