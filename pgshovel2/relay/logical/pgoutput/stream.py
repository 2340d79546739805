"""pgoutput's streamed in-progress transactions (protocol 2+, option ``streaming 'on'``) -> the
same messages as if each had come as Begin..Commit at its commit; no decoding of rows here.

When a transaction outgrows ``logical_decoding_work_mem`` PostgreSQL sends it before it commits,
in blocks: Stream Start ``S`` (xid, first-segment flag) .. Stream Stop ``E``; inside a block every
data message (I/U/D/T/R/Y and transactional M) carries, after its type byte, the xid of the
(sub)transaction that made it. Non-streamed transactions come between blocks as usual. The
transaction ends with Stream Commit ``c`` (xid, flags, commit LSN, end LSN, commit time) or
Stream Abort ``A`` (xid, subxid; subxid == xid: all of it).

:class:`StreamAssembler` keeps nothing of a streamed transaction in memory: each message is
appended to the transaction's spill file (:class:`SpillFile`, an unlinked temporary file in the
spill directory: its space returns at commit, abort, or when the process ends, even by SIGKILL).
A subtransaction's abort truncates the file at that subtransaction's first message, as
PostgreSQL's own apply worker does (worker.c, stream_abort_internal): a subtransaction is
aborted on its own only while it is open, so everything after its first message belongs to it or
to subtransactions nested in it; aborting a parent also aborts released children, which were
written after the parent's first message. At Stream Commit the file is replayed as a synthesized
Begin, its messages without their xid field, and a synthesized Commit: the decoder sees exactly
what a non-streamed transaction gives, so the unit (commit LSN), ordinals, Relation messages
(in replay order, only for committed transactions) and the loop's split and resume rules are the
same. Formats: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html.
"""

import logging
import struct
import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from pgshovel2.errors import RelayError

log = logging.getLogger(__name__)

_START = struct.Struct(">IB")      # xid, first segment (1) or not (0)
_COMMIT = struct.Struct(">IBQQq")  # xid, flags, commit LSN, end LSN, commit time (µs since 2000)
_ABORT = struct.Struct(">II")      # xid, subtransaction xid
_XID = struct.Struct(">I")
_RECORD = struct.Struct(">IQ")     # spilled: message length, its XLogData start LSN
_BEGIN = struct.Struct(">QqI")     # non-streamed Begin: final (commit) LSN, commit time, xid
_END = struct.Struct(">BQQq")      # non-streamed Commit: flags, commit LSN, end LSN, commit time
STREAMED = frozenset(b"IUDTRYM")   # the message types that carry an xid inside a stream block


def protocol_version(server_version_num: int) -> int:
    """The highest pgoutput protocol version the server speaks: 1 before 14, 2 on 14, 3 on 15,
    4 on 16 and later (server_version_num: e.g. 150004)."""
    if server_version_num < 140000:
        return 1
    return min(4, 2 + (server_version_num // 10000 - 14))


class SpillFile:
    """The spilled messages of one streamed top-level transaction (xid), in arrival order.

    file: an unlinked temporary file in directory. subxacts: (xid, offset of its first
    message) of every (sub)transaction seen, in order of first message. Raises RelayError naming
    the directory when the file cannot be created or written.
    """

    def __init__(self, xid: int, directory: str | None, slot: str):
        self.xid, self.directory, self.slot = xid, directory, slot
        self.subxacts: list[tuple[int, int]] = []
        self._seen: set[int] = set()
        try:
            self.file: BinaryIO = tempfile.TemporaryFile(prefix=f"pgshovel2-{slot}-{xid}-", dir=directory)
        except OSError as exc:
            raise RelayError(f"slot {slot}: cannot create a spill file for streamed transaction {xid} in "
                             f"{directory or tempfile.gettempdir()}: {exc.strerror}") from exc

    def append(self, data: bytes, wal_start: int) -> None:
        """Write one message (its type byte, xid and the rest as received)."""
        (subxid,) = _XID.unpack_from(data, 1)
        try:
            if subxid not in self._seen:
                self._seen.add(subxid)
                self.subxacts.append((subxid, self.file.tell()))
            self.file.write(_RECORD.pack(len(data), wal_start))
            self.file.write(data)
        except OSError as exc:
            raise RelayError(f"slot {self.slot}: cannot write the spill file of streamed transaction {self.xid} "
                             f"in {self.directory or tempfile.gettempdir()}: {exc.strerror} (disk full?)") from exc

    def abort(self, subxid: int) -> None:
        """Drop subtransaction subxid's messages and those after its first one (module docstring);
        a subtransaction without messages here drops nothing."""
        index = next((i for i, (xid, _) in enumerate(self.subxacts) if xid == subxid), None)
        if index is None:
            return
        offset = self.subxacts[index][1]
        for xid, _ in self.subxacts[index:]:
            self._seen.discard(xid)
        del self.subxacts[index:]
        self.file.seek(offset)
        self.file.truncate()

    def size(self) -> int:
        """Bytes spilled."""
        return self.file.seek(0, 2)

    def records(self) -> Iterator[tuple[bytes, int]]:
        """The spilled (message, WAL start) pairs, in order, read back in small pieces."""
        self.file.flush()
        self.file.seek(0)
        read = self.file.read
        while True:
            head = read(_RECORD.size)
            if not head:
                return
            size, wal_start = _RECORD.unpack(head)
            data = read(size)
            if len(data) != size:
                raise RelayError(f"slot {self.slot}: the spill file of streamed transaction {self.xid} is "
                                 "shorter than written")
            yield data, wal_start

    def close(self) -> None:
        """Close (and so remove) the file."""
        self.file.close()


class StreamAssembler:
    """Routes pgoutput messages (:meth:`route`): streamed transactions are spilled and given back
    whole at their Stream Commit; everything else passes through unchanged.

    spill_dir: where spill files go (None: the system's temp dir). The replication connection is
    not read while a transaction is replayed: the source's FeedbackKeeper thread keeps replying
    to the walsender meanwhile (relay/logical/feedback.py). Raises RelayError when
    the stream breaks the protocol (a block never started, a commit of a transaction never seen).
    """

    def __init__(self, spill_dir: str | None, slot: str):
        self.spill_dir, self.slot = spill_dir, slot
        self.files: dict[int, SpillFile] = {}
        self._block: SpillFile | None = None  # the open S..E block's transaction
        self.streamed = 0  # transactions committed through a spill file (for tests and logs)

    def reset(self) -> None:
        """Forget every spilled transaction (a new replication session sends them again)."""
        for spill in self.files.values():
            spill.close()
        self.files.clear()
        self._block = None

    @property
    def in_block(self) -> bool:
        """True between a Stream Start and its Stream Stop (messages go to a spill file)."""
        return self._block is not None

    def route(self, data: bytes, wal_start: int) -> Iterable[tuple[bytes, int]]:
        """The (message, WAL start) pairs the decoder gets for one received message."""
        kind = data[0]
        if self._block is not None:
            if kind in STREAMED:
                self._block.append(data, wal_start)
            elif kind == 69:  # E
                self._block = None
            elif kind != 79:  # O: the origin, ignored as outside streams
                raise RelayError(f"slot {self.slot}: pgoutput sent message {data[:1]!r} inside the stream block "
                                 f"of transaction {self._block.xid}")
            return ()
        if kind == 83:  # S
            self._start(data)
            return ()
        if kind == 65:  # A
            self._abort(data)
            return ()
        if kind == 99:  # c
            return self._commit(data)
        if kind == 69:
            raise RelayError(f"slot {self.slot}: pgoutput sent Stream Stop outside a stream block")
        return ((data, wal_start),)

    def _start(self, data: bytes) -> None:
        xid, first = _START.unpack_from(data, 1)
        spill = self.files.get(xid)
        if first:
            if spill is not None:
                raise RelayError(f"slot {self.slot}: pgoutput started streamed transaction {xid} twice")
            spill = self.files[xid] = SpillFile(xid, self.spill_dir, self.slot)
        elif spill is None:
            raise RelayError(f"slot {self.slot}: pgoutput continued streamed transaction {xid}, whose start "
                             "this session never received")
        self._block = spill

    def _abort(self, data: bytes) -> None:
        xid, subxid = _ABORT.unpack_from(data, 1)
        spill = self.files.get(xid)
        if spill is None:
            return  # nothing of it here
        if subxid == xid:
            del self.files[xid]
            spill.close()
            log.info("streamed transaction %d aborted: its spill file is dropped", xid)
        else:
            spill.abort(subxid)

    def _commit(self, data: bytes) -> Iterator[tuple[bytes, int]]:
        xid, _flags, commit_lsn, end_lsn, ts_us = _COMMIT.unpack_from(data, 1)
        spill = self.files.pop(xid, None)
        if spill is None:
            raise RelayError(f"slot {self.slot}: pgoutput committed streamed transaction {xid}, whose changes "
                             "this session never received")
        return self._replay(spill, commit_lsn, end_lsn, ts_us)

    def _replay(self, spill: SpillFile, commit_lsn: int, end_lsn: int, ts_us: int) -> Iterator[tuple[bytes, int]]:
        log.info("replaying streamed transaction %d: %d bytes spilled", spill.xid, spill.size())
        self.streamed += 1
        try:
            yield b"B" + _BEGIN.pack(commit_lsn, ts_us, spill.xid), commit_lsn
            for message, wal_start in spill.records():
                yield message[:1] + message[5:], wal_start
            yield b"C" + _END.pack(0, commit_lsn, end_lsn, ts_us), end_lsn
        finally:
            spill.close()
