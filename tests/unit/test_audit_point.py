"""Which Kafka messages the Kafka audit counts as part of the source's state at its snapshot
(pgshovel2.ops.audit_kafka.AuditPoint): changes by their txid's visibility, snapshot rows by the
unit of their position."""

from pgshovel2 import wire
from pgshovel2.ops.audit_kafka import AuditPoint
from pgshovel2.txids import TxidSnapshot

SNAP = TxidSnapshot.parse("100:110:103,107")


def _change(backend: str, txid: int, unit: int) -> dict:
    return {wire.TXID: str(txid), wire.POSITION: wire.change_header(backend, unit, 0)}


def _read(backend: str, unit: int) -> dict:
    return {wire.TXID: "0", wire.POSITION: wire.snapshot_header(backend, unit, 3)}


def test_a_change_counts_when_its_transaction_is_visible_in_the_snapshot():
    point = AuditPoint(SNAP, logical=True, row_bound=0x5000)
    seen = {txid: point.includes(_change(wire.LOGICAL, txid, 0x4000)) for txid in (99, 100, 103, 105, 107, 110, 120)}
    assert seen == {99: True, 100: True, 103: False, 105: True, 107: False, 110: False, 120: False}


def test_a_change_is_judged_by_txid_not_by_position():
    point = AuditPoint(SNAP, logical=True, row_bound=0x5000)
    assert not point.includes(_change(wire.LOGICAL, 103, 0x10))     # committed early in WAL, not yet visible
    assert point.includes(_change(wire.LOGICAL, 105, 0x9000))        # past the bound, but visible


def test_logical_snapshot_rows_count_below_the_wal_insert_position():
    point = AuditPoint(SNAP, logical=True, row_bound=0x5000)
    assert point.includes(_read(wire.LOGICAL, 0x4FFF))
    assert not point.includes(_read(wire.LOGICAL, 0x5000))


def test_trigger_snapshot_rows_count_up_to_the_last_visible_tick():
    point = AuditPoint(SNAP, logical=False, row_bound=42)
    assert point.includes(_read(wire.TRIGGER, 42))
    assert not point.includes(_read(wire.TRIGGER, 43))
    assert point.includes(_change(wire.TRIGGER, 105, 43))
