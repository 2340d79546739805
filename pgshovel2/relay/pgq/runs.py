"""A trigger batch's rows as runs (:class:`pgshovel2.relay.source.ChangeRun`, :class:`TxnRun`): rows
are the events query's (txid, ts_ms, ev_type, ev_data, ev_extra1, ev_extra2) tuples, grouped by
transaction (pgshovel2.relay.pgq.source)."""

from pgshovel2.relay.source import RUN_MAX, Begin, Change, ChangeRun, Commit, Item, TxnBounds, TxnRun

IUD = frozenset("IUD")


def run_end(chunk: list[tuple], start: int) -> int:
    """The end of the ChangeRun from chunk[start] (an I/U/D row with data): the rows after it of
    the same txid and ts_ms that are I/U/D rows with data, up to RUN_MAX rows in all."""
    txid, ts_ms = chunk[start][0], chunk[start][1]
    stop, end = start + 1, min(len(chunk), start + RUN_MAX)
    while stop < end:
        row = chunk[stop]
        if row[0] != txid or row[1] != ts_ms or row[2] not in IUD or not row[3]:
            break
        stop += 1
    return stop


def txn_bounds(chunk: list[tuple], start: int, ordinal: int, unit: int, prefix: str) -> list[TxnBounds]:
    """The transactions of the TxnRun from chunk[start] (a transaction's first row, at position
    ordinal of unit, whose wire.position_prefix is prefix): the whole transactions from it whose
    rows are I/U/D rows with data of one ts_ms, RUN_MAX rows at most, each followed in chunk by a
    row of another txid (the last one of a chunk may go on in the next); [] for none."""
    out, first, limit = [], start, min(len(chunk), start + RUN_MAX)
    txid, ts_ms = chunk[start][0], chunk[start][1]
    for i in range(start, len(chunk)):
        row = chunk[i]
        if row[0] != txid:
            out.append(TxnBounds(first, i, txid, ts_ms, ts_ms * 1000, None, prefix, ordinal + first - start, unit))
            first, txid, ts_ms = i, row[0], row[1]
        if i >= limit or row[1] != ts_ms or row[2] not in IUD or not row[3]:
            break
    return out


def expand_txns(run: TxnRun, start: int, stop: int) -> list[Item]:
    """TxnRun.expand of a trigger run: what :meth:`pgshovel2.relay.pgq.source.PgqSource._batch` gives for the rows of
    run.txns[start:stop] without TxnRuns."""
    rows, items = run.records, []
    for txn in run.txns[start:stop]:
        items.append(Begin(txn.txid, txn.ts_ms, txn.unit, txn.ordinal))
        i = txn.start
        while i < txn.stop:
            end = min(run_end(rows, i), txn.stop)
            items.append(ChangeRun(txn.txid, txn.ts_ms, txn.unit, txn.ordinal + i - txn.start, rows[i:end], None,
                                   expand))
            i = end
        items.append(Commit(txn.txid, txn.ts_ms, txn.unit, txn.ordinal + txn.stop - txn.start, False))
    return items


def expand(run: ChangeRun, start: int, stop: int) -> list[Change]:
    """ChangeRun.expand of a trigger run: the Changes of run.records[start:stop] (rows as text)."""
    return [Change(run.txid, run.ts_ms, op, data, table, extra if extra else None, run.unit, run.ordinal + i)
            for i, (_txid, _ts, op, data, table, extra) in enumerate(run.records[start:stop], start)]
