"""What a logical source reads ahead of its replication stream for the relay's native lane
(:mod:`pgshovel2.relay.lane`): the change messages of one transaction the stream already holds, for
a ChangeRun (:func:`change_run`), and whole small transactions, for a TxnRun (:func:`txn_run`). Both
take only what ``read()`` gives without waiting (it gives None when the stream holds nothing more),
and both hand back the message that ended them, unhandled.

The decoder (RecordDecoder for our plugin, PgoutputDecoder for pgoutput) is fed every BEGIN and
COMMIT message as if the source had read them one by one, so its transaction ends (``ends``, what
the slot is confirmed up to after the Kafka commit) and ``last_lsn`` stay exact; the change
messages in between go to the lane as the decoder's lane records.
"""

from collections.abc import Callable
from typing import NamedTuple

from pgshovel2.relay.source import RUN_MAX, Begin, Item, RunMaker, TxnBounds, TxnRun
from pgshovel2.wire import LOGICAL, position_prefix

BEGIN, COMMIT = 66, 67  # B and C: the first byte of a BEGIN and a COMMIT, in our plugin's records and pgoutput's


def commit_lsn(begin: bytes) -> int:
    """The commit LSN of a BEGIN message's transaction (bytes 1-8 of our plugin's BEGIN record and
    of pgoutput's Begin, its final LSN)."""
    return int.from_bytes(begin[1:9], "big")


class TxnReads(NamedTuple):
    """What :func:`txn_run` read: run, the whole transactions (None: none); opening and partial,
    the items the decoder gave at the BEGIN of the transaction after them and its change records,
    read but not finished (the source gives them the old way: the items, then a ChangeRun of
    partial); next, the message that ended the reads (None: the stream held no more); last, the
    last message read (next, or the one before a None)."""

    run: TxnRun | None
    opening: list[Item]
    partial: list
    next: object | None
    last: object


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


def txn_run(msg, read: Callable[[], object | None], decoder: RunMaker, committed: int,
            may_read: Callable[[object], bool]) -> TxnReads:
    """The whole transactions from msg (a BEGIN whose commit LSN is above committed, the unit of the
    committed position) that read() gives, every change of them one the lane may take, RUN_MAX
    change records at most. may_read(commit): whether the stream may be read after commit, the
    message that ended a transaction (a keepalive read then must not confirm what is not in Kafka).
    (Our plugin's records have a faster reader of their own: RecordDecoder.txn_run.)"""
    records: list = []
    txns: list[TxnBounds] = []
    opening: list[Item] | None = None  # None: between transactions
    start, last = 0, msg
    while msg is not None:
        last, data = msg, msg.payload
        if opening is None:
            if data[0] != BEGIN or commit_lsn(data) <= committed:
                break
            opening, start = decoder.feed(data, msg.data_start), len(records)
        elif data[0] == COMMIT and len(records) > start:
            decoder.feed(data, msg.data_start)
            begin = next(i for i in opening if type(i) is Begin)
            txns.append(TxnBounds(start, len(records), begin.txid, begin.ts_ms, begin.ts_us, begin.last_lsn,
                                  position_prefix(LOGICAL, begin.unit), 0, begin.unit))
            opening = None
            if not may_read(msg):
                msg = None
                break
        elif len(records) < RUN_MAX and (record := decoder.lane_record(data, msg.data_start)) is not None:
            records.append(record)
            if not opening:  # pgoutput's Begin comes with the transaction's first change
                opening += decoder.opening()
        else:
            break
        msg = read()
    partial = records[start:] if opening is not None else []
    if partial:
        del records[start:]
    return TxnReads(decoder.whole_txns(records, txns), opening or [], partial, msg, last)
