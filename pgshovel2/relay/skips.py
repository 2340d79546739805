"""The operator's requests to leave out a change the relay cannot relay (``pgshovel set skip``,
pgshovel2.ops.skip), as the relay reads them from the set's ``relay/skips`` record:

- ``requested``: position -> {reason, at, by, and for a snapshot row: table, key};
- ``skipped``: position -> what the relay left out (table, op, txid, key, error, at);
- ``stopped``: position -> where the relay stopped last (table, op, txid, key, error, at).

A streamed change keeps its position across restarts (its unit is a PgQ batch or a commit LSN).
A row of an initial snapshot does not: each new attempt takes a new snapshot at a new unit (a
logical set: a new slot at a new consistent point), and rows may come in another order. So a
request for a snapshot row's position also names the row -- table and key, copied from the
``stopped`` entry the relay wrote when it stopped there -- and matches that row in any snapshot.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pgshovel2.wire import parse_header


def _nothing(position: str, what: dict[str, Any]) -> None:
    return None


def is_snapshot_position(position: str) -> bool:
    """True for the ``pgshovel.position`` of a snapshot row (``<unit>:s<ordinal>``)."""
    try:
        return parse_header(position)[2]
    except ValueError:
        return False


@dataclass(frozen=True)
class Skips:
    """positions: the positions asked to be left out; rows: (table tag, key text) of the snapshot
    rows asked to be left out; on_skip(position, what): records a change left out; on_stop(position,
    what): records where the relay stopped (what: table, op, txid, key, error)."""

    positions: frozenset[str] = frozenset()
    rows: frozenset[tuple[str, str]] = frozenset()
    on_skip: Callable[[str, dict[str, Any]], None] = field(default=_nothing)
    on_stop: Callable[[str, dict[str, Any]], None] = field(default=_nothing)

    @classmethod
    def of(cls, record: dict[str, Any] | None, on_skip: Callable[[str, dict[str, Any]], None],
           on_stop: Callable[[str, dict[str, Any]], None]) -> "Skips":
        """The requests of a ``relay/skips`` record (None: none)."""
        requested = (record or {}).get("requested", {})
        rows = frozenset((r["table"], r["key"]) for p, r in requested.items()
                         if is_snapshot_position(p) and r.get("table") and r.get("key") is not None)
        return cls(frozenset(requested), rows, on_skip, on_stop)

    def asked(self, position: str, what: dict[str, Any]) -> bool:
        """True when the change at position (what: its table and key) is to be left out."""
        if position in self.positions:
            return True
        return bool(self.rows) and is_snapshot_position(position) and (what.get("table"), what.get("key")) in self.rows
