"""SetReader's handoff rule (what a bootstrap already holds), without Kafka: the rule is pure."""

from pgshovel2.consumer.model import Change, Transaction
from pgshovel2.consumer.reader import SetReader
from pgshovel2.txids import ConsistentPoint, TxidSnapshot
from pgshovel2.wire import LOGICAL, Lsn, snapshot_header


def reader(after, copied=None) -> SetReader:
    r = SetReader.__new__(SetReader)  # only the handoff state; no Kafka
    r.after_snapshot, r.copied_tables, r.skipped_visible = after, copied, 0
    return r


def row(table: str, position: str) -> Change:
    return Change(topic=f"p.{table}", partition=0, offset=0, table=table, op="r", key={"id": 1},
                  value={"id": 1}, txid=0, position=position, ts_ms=0)


def chunk(*changes: Change) -> Transaction:
    return Transaction(txid=0, position=changes[0].position, ts_ms=0, changes=list(changes), snapshot=True)


def test_logical_snapshot_rows_after_the_point_are_kept_before_it_skipped():
    point = ConsistentPoint(Lsn.parse("0/2000"))
    before, after = snapshot_header(LOGICAL, 0x1000, 0), snapshot_header(LOGICAL, 0x3000, 0)
    r = reader(point)
    assert r._after_bootstrap(chunk(row("s.t", before))) is None
    kept = r._after_bootstrap(chunk(row("s.t", before), row("s.t", after)))
    assert [c.position for c in kept.changes] == [after]


def test_rows_of_a_table_the_bootstrap_did_not_copy_are_kept():
    snap = TxidSnapshot.parse("10:20:")
    r = reader(snap, frozenset({"s.t"}))
    assert r._after_bootstrap(chunk(row("s.t", "00000000000000000005:s0000000000"))) is None
    added = chunk(row("s.added", "00000000000000000009:s0000000000"))
    assert r._after_bootstrap(added) is added
    assert reader(snap)._after_bootstrap(added) is None  # unknown copied tables: every one counts as copied


def test_transactions_the_handoff_covers_are_skipped():
    r = reader(TxidSnapshot.parse("10:20:15"))
    txn = Transaction(txid=15, position="00000000000000000007:0000000000", ts_ms=0, changes=[], snapshot=False)
    assert r._after_bootstrap(txn) is txn
    old = Transaction(txid=5, position="00000000000000000006:0000000000", ts_ms=0, changes=[], snapshot=False)
    assert r._after_bootstrap(old) is None and r.skipped_visible == 1
