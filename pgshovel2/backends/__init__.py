"""Capture backends in the database: ``trigger`` (PgQ queue + capture triggers) and ``logical``
(a replication slot read through our output plugin). Each module owns its install and
uninstall, its queue or slot lifecycle, its ``encode_row`` function, its lag and its
exported-snapshot handoff; the functions here pick the module of a set record, as
:mod:`pgshovel2.backends.lifecycle` does for set create, upgrade, drop, repoint and audit, and
:mod:`pgshovel2.backends.dropped` for the relay's drop watch: nothing outside this package tests
which capture a set has. (A drain wait that only the database can answer is in each module;
pgshovel2.ops.status.wait_caught_up is the one that also holds when a relay re-creates its slot.)
"""

from typing import Any

from pgshovel2.backends import logical, pgq_ticker, trigger
from pgshovel2.backends.snapshot import ExportedSnapshot, TableReader
from pgshovel2.errors import PgshovelError
from pgshovel2.setrecord import SetRecord, SlotCapture


def encode_row(record: SetRecord) -> str | None:
    """The SQL function giving a row in the capture form of the set (its backend, and for a
    trigger set its capture kind: pgshovel2.encode_row or pgshovel2_pl.encode_row); None for
    a logical set read through pgoutput (rows are read as text and converted:
    pgshovel2.backends.snapshot)."""
    if isinstance(record.capture, SlotCapture):
        return logical.encode_row(record.capture.plugin)
    return trigger.encode_row(record.capture)


def reader(record: SetRecord, error: type[PgshovelError]) -> TableReader:
    """A REPEATABLE READ reader of the set's tables now, in its backend's capture form (as the
    relay role: SetRecord.relay_dsn)."""
    return TableReader(record.relay_dsn, encode_row(record), error)


def export(record: SetRecord, error: type[PgshovelError]) -> ExportedSnapshot:
    """An exported snapshot of the set's database for a copy (a bootstrap), with its backend's
    handoff; a logical set's uses a temporary slot. As the relay role (SetRecord.relay_dsn). Raises error."""
    if isinstance(record.capture, SlotCapture):
        return logical.export(record.relay_dsn, error, plugin=record.capture.plugin)
    return trigger.export(record.relay_dsn, record.capture, error)


def lag(record: SetRecord) -> dict[str, Any]:
    """How far the set's relay is behind, from the database: {kind: "queue"|"slot", ...} with
    the fields of trigger.queue_lag or logical.slot_lag (or {error}); a queue's also has
    ``ticking``: pgq_ticker.who_ticks (who ticks the queue: pgqd or the relay)."""
    if isinstance(record.capture, SlotCapture):
        return {"kind": "slot", **logical.slot_lag(record.dsn, record.capture.slot)}
    return {"kind": "queue", **trigger.queue_lag(record.dsn, record.capture),
            "ticking": pgq_ticker.who_ticks(record.dsn, record.capture.queue)}


