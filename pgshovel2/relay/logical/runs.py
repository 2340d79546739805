"""The native lane's items from a logical stream.

:class:`RunMaker` is what the two logical decoders (RecordDecoder for our plugin, PgoutputDecoder for
pgoutput) share to make ChangeRuns and TxnRuns (:mod:`pgshovel2.relay.emit.lane`). The rest is what
a logical source reads ahead of its replication stream for them: the change messages of one
transaction the stream already holds, for a ChangeRun (:func:`change_run`), and what a decoder's
``txn_run`` reads of whole small transactions, for a TxnRun (:class:`TxnReads`). Both take only
what ``read()`` gives without waiting (it gives None when the stream holds nothing more), and both
hand back the message that ended them, unhandled.

A decoder's ``txn_run`` leaves its transaction ends (``ends``, what the slot is confirmed up to
after the Kafka commit) and ``last_lsn`` as if it had been fed every BEGIN and COMMIT message one by
one; the change messages in between go to the lane as the decoder's lane records.
"""

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from pgshovel2.relay.source import RUN_MAX, Begin, Change, ChangeRun, Commit, Item, TxnBounds, TxnRun

BEGIN, COMMIT = 66, 67  # B and C: the first byte of a BEGIN and a COMMIT, in our plugin's records and pgoutput's
PG_EPOCH_US = 946_684_800_000_000  # µs from the Unix epoch to PostgreSQL's (2000-01-01): both BEGINs' commit times


def commit_lsn(begin: bytes) -> int:
    """The commit LSN of a BEGIN message's transaction (bytes 1-8 of our plugin's BEGIN record and
    of pgoutput's Begin, its final LSN)."""
    return int.from_bytes(begin[1:9], "big")


class TxnReads(NamedTuple):
    """What a decoder's ``txn_run`` read: run, the whole transactions (None: none); opening and partial,
    the items the decoder gave at the BEGIN of the transaction after them and its change records,
    read but not finished (the source gives them the old way: the items, then a ChangeRun of
    partial); next, the message that ended the reads (None: the stream held no more); last, the
    last message read (next, or the one before a None)."""

    run: TxnRun | None
    opening: list[Item]
    partial: list
    next: object | None
    last: object


class RunMaker:
    """What a logical decoder (RecordDecoder, PgoutputDecoder) shares for ChangeRuns: its open
    transaction (``_txid``, ``_ts_ms``, ``_unit``, ``_ordinal``: the next change's), its table
    tags by record index (``tags``) and ``_expand`` (ChangeRun.expand)."""

    _txid: int
    _ts_ms: int
    _unit: int
    _ordinal: int
    tags: list[str]
    ends: deque[tuple[int, int]]  # (unit, LSN to confirm) of each transaction end and heartbeat read
    last_lsn: int | None

    def run(self, records: list) -> ChangeRun:
        """The ChangeRun of records (each one the decoder's ``lane_record`` gave), the open
        transaction's next changes."""
        ordinal = self._ordinal
        self._ordinal += len(records)
        return ChangeRun(self._txid, self._ts_ms, self._unit, ordinal, records, self.tags, self._expand)

    def whole_txns(self, records: list, txns: list["TxnBounds"]) -> "TxnRun | None":
        """The TxnRun of the whole transactions txns over records (their change records, each one
        ``lane_record`` gave); None when there is no transaction."""
        return TxnRun(records, txns, True, self.tags, self.expand_txns) if txns else None

    def scanned(self, result: tuple) -> TxnReads:
        """The TxnReads of a native scan's result (native/src/stream/scan.rs: records, txns, ends, last_lsn,
        partial, begin, msg, last): its ends and last_lsn taken on, then ended as txn_run ends,
        through the decoder's ``_unfinished`` when begin opened a transaction the scan could not
        finish, else ``_whole``."""
        records, txns, ends, self.last_lsn, partial, begin, msg, last = result
        self.ends.extend(ends)
        if begin is not None:
            return self._unfinished(records + partial, txns, len(records), begin, msg, last)
        return self._whole(records, txns, msg, last)

    def opening(self) -> list["Item"]:
        """Items to give before the next run (the Begin of a transaction its first lane record
        opened); none here: a decoder that opens transactions at their first change says so."""
        return []

    def feed(self, data: bytes, wal_start: int) -> list["Item"]:
        """The items of one message of the stream; wal_start: its XLogData start LSN."""
        raise NotImplementedError

    def lane_record(self, data: bytes, lsn: int) -> object | None:
        """The ChangeRun record of a message the native lane may take, else None."""
        raise NotImplementedError

    def expand_txns(self, run: "TxnRun", start: int, stop: int) -> list["Item"]:
        """TxnRun.expand of a logical TxnRun: the items the source gives without TxnRuns for the
        transactions run.txns[start:stop] (each its own unit): Begin, a ChangeRun, Commit."""
        items: list[Item] = []
        for txn in run.txns[start:stop]:
            records = run.records[txn.start:txn.stop]
            items += (Begin(txn.txid, txn.ts_ms, txn.unit, 0, txn.ts_us, txn.last_lsn),
                      ChangeRun(txn.txid, txn.ts_ms, txn.unit, 0, records, run.tags, self._expand),
                      Commit(txn.txid, txn.ts_ms, txn.unit, len(records), True))
        return items

    def _expand(self, run: ChangeRun, start: int, stop: int) -> list[Change]:
        raise NotImplementedError



def change_run(first: object, read: Callable[[], object | None], decoder: RunMaker) -> tuple[list, object | None]:
    """(records, next message or None): first and the lane records of the change messages after it
    that read() gives (at most RUN_MAX); the message that ended the run, unhandled."""
    records, lane_record = [first], decoder.lane_record
    while len(records) < RUN_MAX:
        msg = read()
        if msg is None:
            break
        record = lane_record(msg.payload, msg.data_start)
        if record is None:
            return records, msg
        records.append(record)
    return records, None
