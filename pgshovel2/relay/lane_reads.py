"""What a logical source reads ahead of its replication stream for the relay's native lane
(:mod:`pgshovel2.relay.lane`): the change messages of one transaction the stream already holds, for
a ChangeRun (:func:`change_run`), and what a decoder's ``txn_run`` (RecordDecoder for our plugin,
PgoutputDecoder for pgoutput) reads of whole small transactions, for a TxnRun (:class:`TxnReads`).
Both take only what ``read()`` gives without waiting (it gives None when the stream holds nothing
more), and both hand back the message that ended them, unhandled.

A decoder's ``txn_run`` leaves its transaction ends (``ends``, what the slot is confirmed up to
after the Kafka commit) and ``last_lsn`` as if it had been fed every BEGIN and COMMIT message one by
one; the change messages in between go to the lane as the decoder's lane records.
"""

from collections.abc import Callable
from typing import NamedTuple

from pgshovel2.relay.source import RUN_MAX, Item, RunMaker, TxnRun

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
