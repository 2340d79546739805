"""An online snapshot chunk's rows as the relay produces them (:func:`emit_chunk`): op r at the
snapshot positions of the unit where the chunk is emitted, framed by the table's SNAPSHOT_BEGIN and
SNAPSHOT_END records (:mod:`pgshovel2.relay.snapshot.online` decides what a chunk emits)."""

import time
from collections.abc import Callable
from typing import NamedTuple

from pgshovel2.catalog import Table
from pgshovel2.errors import EncodeError
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.envelopes import SNAPSHOT_INCREMENTAL
from pgshovel2.wire import LOGICAL, snapshot_header


class Emission(NamedTuple):
    """What a chunk emits: rows of table (op r), whether it is the table's first chunk (a
    SNAPSHOT_BEGIN record goes before them) and its last (a SNAPSHOT_END record after them, with
    total, the table's rows emitted by the request)."""

    table: Table
    rows: list[list]
    first: bool
    last: bool
    total: int


def emit_chunk(emitter: Emitter, emission: Emission, backend: str, unit: int,
               unencodable: Callable[[EncodeError, str, list], None]) -> None:
    """Produce emission's rows as op r at the snapshot positions ``<unit>:s<i>`` (unit: where the
    chunk is emitted, a tick or commit LSN by backend), framed by the table's SNAPSHOT_BEGIN /
    SNAPSHOT_END records on its first and last chunk; a row that cannot be encoded goes to
    unencodable(error, position, row) (which raises unless the operator asked to skip it)."""
    table, now_ms = emission.table, int(time.time() * 1000)
    topic = emitter.routes[table.qualified].topic
    if emission.first:
        emitter.snapshot_mark("SNAPSHOT_BEGIN", topic, snapshot_header(backend, unit, 0), now_ms)
    for index, row in enumerate(emission.rows):
        header = snapshot_header(backend, unit, index)
        try:
            emitter.snapshot_row(table, row, header, now_ms, SNAPSHOT_INCREMENTAL, unit if backend == LOGICAL else None)
        except EncodeError as exc:
            unencodable(exc, header, row)
    if emission.last:
        emitter.snapshot_mark("SNAPSHOT_END", topic, snapshot_header(backend, unit, len(emission.rows)), now_ms,
                              emission.total)
