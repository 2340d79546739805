"""The Source protocol: what the relay loop (:mod:`pgshovel2.relay.loop`) reads from.

A source turns a set's capture into one stream of items, in commit order:

- :class:`Begin` -- a source transaction starts;
- :class:`Change` -- one captured change (I/U/D/T) of that transaction;
- :class:`ChangeRun` -- consecutive changes of that transaction in the source's raw form, for
  the relay's native lane (:mod:`pgshovel2.relay.emit.lane`); ``expand`` gives them as Changes;
- :class:`TxnRun` -- whole small transactions in the source's raw form, for the native lane;
  ``expand`` gives them as the items above;
- :class:`Control` -- a control event in the stream (a set-version marker ``V`` or a
  schema change ``S``, :mod:`pgshovel2.relay.control`): no data, switches the layout; or an
  online snapshot's watermark (``W``, or a ``V`` whose row has no version: :mod:`pgshovel2.relay.snapshot.online`);
- :class:`Commit` -- the transaction ends (txid None: a point with no transaction of its
  own, e.g. an empty PgQ batch or a heartbeat of the slot);
- :class:`Idle` -- nothing to read now.

Every item carries its place in the source as (unit, ordinal): unit is what the source is
acknowledged by (a PgQ tick id, a commit LSN), ordinal counts the unit's events (see
:class:`pgshovel2.wire.Position`). A Commit whose ``complete`` is true ends its unit: once
a Kafka transaction holding the position (unit, ordinal, complete) is committed, the loop
calls :meth:`Source.ack` with it and the source may forget the unit.

Sources never know Kafka; the loop never knows PgQ or slots.
"""

from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from pgshovel2.backends.chunks import WATERMARK_EVENT
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import Position

SCHEMA_CHANGE, SET_VERSION = "S", "V"  # the control events' ops (pgshovel2.relay.control)
# W: an online snapshot's watermark in a PgQ queue (pgshovel2.relay.snapshot.online)
CONTROL_OPS = frozenset({SCHEMA_CHANGE, SET_VERSION, WATERMARK_EVENT})
RUN_MAX = 512  # records in one ChangeRun or TxnRun: how far a source reads ahead for the lane


class Begin(NamedTuple):
    """A source transaction starts. txid: 64-bit epoch txid (as txid_current()); ts_ms: its
    capture or commit time, ms since the Unix epoch; (unit, ordinal): where its first event is.
    Logical backend only (None otherwise): ts_us, the commit time in µs; last_lsn, the LSN up to
    which the stream was completely processed before it (the end of the previous transaction or
    heartbeat, else the slot's confirmed position at the start: Debezium's "last committed LSN")."""

    txid: int
    ts_ms: int
    unit: int
    ordinal: int
    ts_us: int | None = None
    last_lsn: int | None = None


class Change(NamedTuple):
    """One captured change (a tuple: one is made per change, so it must be cheap).

    txid, ts_ms: as its Begin; op: I/U/D/T; row, before: decoded capture rows (lists in the
    table's column order) or None; table: table tag (Table.qualified); (unit, ordinal): its
    place; lsn: the change's own LSN (logical backend; None for PgQ). A DELETE carries the old
    row (its key) in row. unchanged: positions (in the table's columns) of the values an UPDATE
    left unchanged and the source did not log (TOASTed values without REPLICA IDENTITY FULL):
    None in row, header ``pgshovel.unchanged`` in Kafka (docs/wire.rst); empty otherwise.
    """

    txid: int
    ts_ms: int
    op: str
    row: list | None
    table: str
    before: list | None
    unit: int
    ordinal: int
    lsn: int | None = None
    unchanged: tuple[int, ...] = ()


class ChangeRun(NamedTuple):
    """Consecutive changes of one transaction as the source's raw records, read in one go while
    the source had them: change records of our plugin (logical backend; sql/decoder/README.rst,
    bytes), pgoutput's change messages (PgoutputDecoder.lane_record: (PgoutputRows, table
    index, message, XLogData start, relation)), or PgQ event rows (trigger backend; (txid,
    ts_ms, op, data, table, extra), rows as text, one ts_ms).

    txid, ts_ms, unit: as Change; ordinal: the first record's; tags: table tags by the records'
    table index (None: trigger rows name their table); expand(run, start, stop): the
    Changes of records[start:stop] (with their ordinals), what the source would have given one by one.
    """

    txid: int
    ts_ms: int
    unit: int
    ordinal: int
    records: list
    tags: list[str] | None
    expand: Callable[["ChangeRun", int, int], list[Change]]


class TxnBounds(NamedTuple):
    """One transaction of a :class:`TxnRun`: its records are run.records[start:stop]; txid, ts_ms,
    ts_us, last_lsn as its Begin (ts_us: ts_ms * 1000 and last_lsn None for PgQ rows); prefix:
    wire.position_prefix of its unit; ordinal: the position ordinal of records[start]; unit: as
    Change. Lane.encode_txns reads the first eight fields."""

    start: int
    stop: int
    txid: int
    ts_ms: int
    ts_us: int
    last_lsn: int | None
    prefix: str
    ordinal: int
    unit: int


class TxnRun(NamedTuple):
    """Whole transactions in the source's raw form for the relay's native lane, which writes each
    one's BEGIN record, changes and END record in one call (Lane.encode_txns): PgQ event rows
    (trigger backend; (txid, ts_ms, op, data, table, extra)) of one unit, or our plugin's change
    records (logical backend; bytes), each transaction its own unit. Every record is an I/U/D
    change with its row; a transaction has one ts_ms and at least one record.

    txns: the transactions' bounds, in order; complete: each transaction ends its unit (logical),
    else none does (a PgQ batch ends at its last event); tags: as ChangeRun; expand(run, start,
    stop): the items the source would have given for txns[start:stop], Begin, ChangeRuns and
    Commit per transaction.
    """

    records: list
    txns: list[TxnBounds]
    complete: bool
    tags: list[str] | None
    expand: Callable[["TxnRun", int, int], list["Item"]]


class Control(NamedTuple):
    """A control event (op ``V`` set version, ``S`` schema change), fields as :class:`Change`:
    row is the event's payload (decoded JSON), before the DDL statement for ``S``."""

    txid: int
    ts_ms: int
    op: str
    row: dict | None
    table: str
    before: str | None
    unit: int
    ordinal: int


class Commit(NamedTuple):
    """The end of a source transaction (txid None: of none): the stream is at (unit, ordinal),
    a point where a Kafka transaction may end; complete: the unit is finished and may be
    acknowledged once that point is in Kafka. ts_ms: the END record's time."""

    txid: int | None
    ts_ms: int
    unit: int
    ordinal: int
    complete: bool


class Idle(NamedTuple):
    """Nothing to read now; the loop may commit what is due, then :meth:`Source.wait` at most
    wait seconds."""

    wait: float


Item = Begin | Change | ChangeRun | TxnRun | Control | Commit | Idle


class Lag(NamedTuple):
    """How far the set's capture is ahead of what the source acknowledged (None: not known for
    this source): seconds, events (queued, not acknowledged), WAL bytes behind, WAL bytes the
    slot retains."""

    seconds: float | None = None
    events: int | None = None
    bytes: int | None = None
    retained_bytes: int | None = None


class Source(Protocol):
    """A set's capture, read as items (module docstring).

    backend: ``trigger`` or ``logical`` (the positions it makes). commit_delay: seconds a
    complete point may wait for more before the loop commits it (0: at once; the PgQ source
    cannot read on until its batch is acknowledged).
    """

    backend: str
    commit_delay: float

    def handoff(self, export: bool) -> tuple[Position, ExportedSnapshot | None, dict]:
        """Where a new stream starts: (its position, an exported snapshot of the set's tables at
        exactly that position when export -- to be closed by the caller -- else None, the
        record kept in ZooKeeper as the relay's ``snapshot``)."""

    def switch(self, record: SetRecord) -> None:
        """The set version in effect from the next item on: called before streaming (the layout the
        committed position was relayed in) and at every switch, while the stream waits at the
        Control that made it (a logical source decodes the new version's tables from there)."""

    def resume(self, position: Position) -> None:
        """Check the source can go on after position (committed earlier); raise RelayError if not."""

    def items(self, position: Position) -> Iterator[Item]:
        """The stream after position (the committed one; units it covers may come again)."""

    def ack(self, position: Position) -> None:
        """Everything up to position (complete) is in Kafka: release it in the source."""

    def wait(self, timeout: float) -> None:
        """Block until the source may have more, at most timeout seconds."""

    def lag(self) -> Lag:
        """The source's lag, for progress lines and metrics."""

    def describe(self) -> str:
        """What the source reads, for log lines: ``queue <name>`` or ``slot <name>``."""

    def close(self) -> None:
        """Close the source's connections (never raises)."""
