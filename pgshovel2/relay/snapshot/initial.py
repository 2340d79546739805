"""The initial snapshot's rows, produced into the relay's open Kafka transaction at the handoff."""

import logging
import threading
import time
from collections.abc import Callable

from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.catalog import Table
from pgshovel2.errors import EncodeError, StopRequestedError
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.envelopes import SnapshotMarks
from pgshovel2.wire import LOGICAL, Position, snapshot_header

log = logging.getLogger(__name__)
LOG_EVERY = 5.0  # s between progress lines of one table


def emit_initial_snapshot(stop: threading.Event, snap: ExportedSnapshot, backend: str, at: Position,
                          tables: tuple[Table, ...], emitter: Emitter,
                          unencodable: Callable[[EncodeError, str, Table, list], None]) -> tuple[int, int, float]:
    """Produce every row of tables in snap as op ``r`` through emitter (into its open Kafka
    transaction), each at the snapshot position ``<at.unit>:s<ordinal>`` of backend (the source's:
    a tick, or for logical the slot's consistent point minus one: Position.at_consistent_point)
    with its Debezium snapshot marker (SnapshotMarks, one row behind) and, logical, the
    consistent point as its ``source.lsn``; returns (rows, capture time in ms, seconds).

    A row that cannot be encoded goes to unencodable(error, position, table, row), which raises
    unless the operator asked to skip it. Raises StopRequestedError when stop is set; the caller
    aborts the Kafka transaction on any error.
    """
    now_ms, started, ordinal, last_log = int(time.time() * 1000), time.monotonic(), 0, time.monotonic()
    unit = at.unit
    lsn = snap.handoff.lsn if backend == LOGICAL else None

    def emit(item: tuple, marker: str) -> None:
        table, row, header = item
        try:
            emitter.snapshot_row(table, row, header, now_ms, marker, lsn)
        except EncodeError as exc:
            unencodable(exc, header, table, row)

    marks = SnapshotMarks(emit)
    for table in tables:
        total, done = snap.count(table), 0
        for row in snap.rows(table):
            if stop.is_set():
                raise StopRequestedError("stopped during the initial snapshot")
            marks.add(table.qualified, (table, row, snapshot_header(backend, unit, ordinal)))
            ordinal += 1
            done += 1
            if done % 1000 == 0 and time.monotonic() - last_log >= LOG_EVERY:
                last_log = time.monotonic()
                log.info("snapshot %s: %d/%d rows (%.0f rows/s)", table.qualified, done, total,
                         ordinal / max(last_log - started, 1e-6))
        log.info("snapshot %s: %d rows", table.qualified, done)
    marks.finish()
    return ordinal, now_ms, time.monotonic() - started
