"""The one home of what pgshovel2 writes into Kafka besides row values (WIRE.md, docs/wire.rst):
header names, positions, LSNs, the integer sentinels and the raw-schema helper, and
:func:`read_position`, the reader of the relay's committed position.

A *position* says where a relay is in its source. Its *unit* is what the source is
acknowledged by: the PgQ tick id of a batch (``trigger`` backend) or the commit LSN of a
source transaction (``logical``); its *ordinal* counts the events of that unit. Text
forms (header ``pgshovel.position``, sortable as text within a set):

- trigger change ``<tick, 20 decimal digits>:<ordinal, 10 digits>``; snapshot row
  ``<tick>:s<ordinal>`` (after every change up to that tick, before the next batch);
- logical change ``<commit LSN, 16 hex digits>:<ordinal, 10 digits>``; snapshot row
  ``<consistent point LSN>:s<ordinal>``.

Each Kafka transaction of a relay ends with one position record (:meth:`Position.encode`,
JSON) on the set's positions topic ``{prefix}.positions`` (one partition, compacted, key
``{cluster}/{set}``), so the position is committed exactly when the data it covers is;
:func:`pgshovel2.wire.positions.read_position` reads the last one back.
"""

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from pgshovel2.errors import RelayError

# Headers of every data message (UTF-8 strings); the transactions topic's records carry SET and VERSION.
OP, TXID, POSITION, TS_MS, SET, VERSION = (
    "pgshovel.op", "pgshovel.txid", "pgshovel.position", "pgshovel.ts_ms", "pgshovel.set", "pgshovel.version")
DATA_HEADERS = (OP, TXID, POSITION, TS_MS)
# On an UPDATE's data message only, when the source did not log some of its values (TOASTed values
# an UPDATE left unchanged, logical backend without REPLICA IDENTITY FULL): the JSON array of those
# columns' names (exact, unescaped), whose value fields are null. Consumers keep the previous values.
UNCHANGED = "pgshovel.unchanged"
# Oversized messages (set config ``oversized``, docs/wire.rst "Messages Kafka cannot take"). On a
# data message whose value is a placeholder (empty bytes) for a message Kafka could not take: JSON
# {"topic": dead-letter topic, "chunks": n, "bytes": the message's value size}. On each chunk in the
# dead-letter topic: the data topic it stands in for, and "i/n" (i from 1). On a data message
# whose named text/bytea columns were cut to fit: JSON {column: its length before (characters;
# bytea: bytes)}.
DEAD_LETTER = "pgshovel.dead_letter"
DEAD_LETTER_TOPIC, DEAD_LETTER_CHUNK = "pgshovel.dead_letter.topic", "pgshovel.dead_letter.chunk"
TRUNCATED = "pgshovel.truncated"

# Avro stand-ins for ±infinity: date (int) and timestamp (long) columns use the type's min/max.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

TRIGGER, LOGICAL = "trigger", "logical"
BACKENDS = (TRIGGER, LOGICAL)


def raw_schema(schema: Any) -> Any:
    """A copy of an Avro schema without logicalType annotations: datums are then the plain Avro
    values (decimal bytes, date/timestamp numbers), which decode and re-encode to the same bytes."""
    if isinstance(schema, list):
        return [raw_schema(s) for s in schema]
    if isinstance(schema, dict):
        return {k: raw_schema(v) for k, v in schema.items() if k != "logicalType"}
    return schema


class Lsn(int):
    """A PostgreSQL WAL location (``pg_lsn``) as a 64-bit int; ``str()`` gives ``16/B374D848``."""

    @classmethod
    def parse(cls, text: str) -> "Lsn":
        """An Lsn from ``pg_lsn`` text (``X/Y``, hex); raises ValueError naming the text."""
        try:
            high, low = text.split("/")
            return cls((int(high, 16) << 32) | int(low, 16))
        except (ValueError, AttributeError) as exc:
            raise ValueError(f"malformed LSN {text!r} (expected X/Y in hex)") from exc

    def __str__(self) -> str:
        return f"{self >> 32:X}/{self & 0xFFFFFFFF:X}"

    def __repr__(self) -> str:
        return f"Lsn('{self}')"


def change_header(backend: str, unit: int, ordinal: int) -> str:
    """``pgshovel.position`` of the ordinal-th event of unit (a tick or a commit LSN, by backend)."""
    return change_header_at(position_prefix(backend, unit), ordinal)


def position_prefix(backend: str, unit: int) -> str:
    """The part of :func:`change_header` before the ordinal (the relay's per-change path computes
    it once per unit and calls :func:`change_header_at`)."""
    return f"{unit:016X}:" if backend == LOGICAL else f"{unit:020d}:"


def change_header_at(prefix: str, ordinal: int) -> str:
    """:func:`change_header` of the ordinal-th event of the unit whose position_prefix is prefix.
    (``str.zfill`` pads as the format ``010d`` does, sign included, at a fraction of its cost:
    this runs per change.)"""
    return prefix + str(ordinal).zfill(10)


def snapshot_header(backend: str, unit: int, ordinal: int) -> str:
    """``pgshovel.position`` of the ordinal-th snapshot row handed off at unit (tick or LSN)."""
    if backend == LOGICAL:
        return f"{unit:016X}:s{ordinal:010d}"
    return f"{unit:020d}:s{ordinal:010d}"


def parse_header(text: str) -> tuple[str, int, bool, int]:
    """(backend, unit, is a snapshot row, ordinal) of a ``pgshovel.position`` header.

    Raises ValueError naming the text when it is not a position.
    """
    try:
        unit_text, rest = text.split(":")
        snapshot = rest.startswith("s")
        ordinal = int(rest[1:] if snapshot else rest)
        if len(unit_text) == 16:
            return LOGICAL, int(unit_text, 16), snapshot, ordinal
        if len(unit_text) == 20:
            return TRIGGER, int(unit_text), snapshot, ordinal
    except ValueError:
        pass
    raise ValueError(f"malformed pgshovel.position {text!r}")


@dataclass(frozen=True)
class Position:
    """What of a set's source is in Kafka: a relay's committed position.

    unit: PgQ tick id (trigger: the batch's cur_tick_id from pgq.next_batch_info; for a
    snapshot handoff, the consumer's last finished tick) or commit LSN (logical: from the
    transaction's BEGIN record; for a handoff, the slot's consistent point). ordinal: events
    of that unit in Kafka (the next one to relay). complete: the whole unit is in Kafka (only
    its acknowledgement may be missing). txid_snapshot: the trigger backend's handoff
    (``xmin:xmax:xip``) the queue is filtered against, None when the initial snapshot was
    skipped (and always for logical). set_version: the set version in effect at this
    position (0: unknown); batch_version: the one in effect at the start of unit, from which
    a restart replays a partly committed unit (0: as set_version). snapshot: the progress of
    the online snapshot committed with this position (:mod:`pgshovel2.relay.snapshot.online`:
    ``{id, table, last_key, chunk, rows, done}``), None when none ran (records written before
    online snapshots have no such field and decode as None).
    """

    unit: int
    ordinal: int
    complete: bool
    txid_snapshot: str | None = None
    backend: str = TRIGGER
    set_version: int = 0
    committed_at_ms: int = 0
    batch_version: int = 0
    snapshot: dict | None = None

    def covers(self, unit: int, ordinal: int) -> bool:
        """True when event ordinal of unit is in Kafka."""
        return unit < self.unit or (unit == self.unit and (self.complete or ordinal < self.ordinal))

    def reaches(self, unit: int, ordinal: int, complete: bool) -> bool:
        """True when everything up to the point (unit, ordinal, complete) is in Kafka."""
        if unit != self.unit:
            return unit < self.unit
        return self.complete or (not complete and ordinal <= self.ordinal)

    def start_version(self) -> int:
        """The set version a restarted relay starts from (0: unknown): a partly committed
        unit is not acknowledged, so it comes again and is replayed from its start."""
        if not self.complete and self.batch_version:
            return self.batch_version
        return self.set_version

    @classmethod
    def at_consistent_point(cls, lsn: int) -> "Position":
        """The logical handoff at a slot's consistent point lsn (``CREATE_REPLICATION_SLOT``'s
        consistent_point): unit lsn - 1, complete, so the snapshot rows emitted at it
        (``<unit>:s<ordinal>``) sort after every change committed before the point and before
        every change committed at or after it. The slot decodes each transaction whose commit
        record starts at or after lsn, and the snapshot it exported holds each one before it;
        one can commit exactly at lsn (its record right after the one that made the slot
        consistent). Commit records are 8-byte aligned, so none is at lsn - 1."""
        return cls(lsn - 1, 0, True, None, LOGICAL)

    def header(self) -> str:
        """This position as a ``pgshovel.position`` header value."""
        return change_header(self.backend, self.unit, self.ordinal)

    def describe(self) -> str:
        """For operators: ``tick 1060816136, event 12`` or ``commit LSN 16/B374D848, change 12``."""
        if self.backend == LOGICAL and self.unit % 8 == 7:  # no commit is there: at_consistent_point's
            return f"the slot's consistent point {Lsn(self.unit + 1)}"
        unit = f"commit LSN {Lsn(self.unit)}" if self.backend == LOGICAL else f"tick {self.unit}"
        return unit + ("" if self.complete else f", first {self.ordinal} events")

    def encode(self) -> bytes:
        """JSON value of the position record (committed_at_ms set to now; the unit under ``tick``,
        the name records had before LSNs)."""
        data = asdict(self)
        data["tick"] = data.pop("unit")
        data["committed_at_ms"] = int(time.time() * 1000)
        return json.dumps(data, sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> "Position":
        """Parse a position record value; raises RelayError when it is not one."""
        try:
            fields = json.loads(data)
            fields["unit"] = fields.pop("tick")
            return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError) as exc:
            raise RelayError(f"unreadable position record {data[:200]!r}: {exc}") from exc
