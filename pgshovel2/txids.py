"""PostgreSQL txid snapshots (``txid_current_snapshot()``) and the visibility rule.

A txid snapshot's text form is ``xmin:xmax:xip1,xip2,...`` (64-bit, epoch
extended txids, as in the ``pgshovel.txid`` header). A transaction is visible
in it -- its changes are in a copy read under that snapshot -- exactly when
PostgreSQL's ``txid_visible_in_snapshot`` says so:

- txid < xmin: visible (committed before the snapshot; aborted ones never reach Kafka);
- txid >= xmax: not visible (started after the snapshot);
- txid in the xip list: not visible (in progress when the snapshot was taken);
- otherwise: visible.
"""

from dataclasses import dataclass

from pgshovel2.wire import Lsn, parse_header


@dataclass(frozen=True)
class TxidSnapshot:
    """A parsed txid snapshot: xmin, xmax and the in-progress txids (xip)."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> "TxidSnapshot":
        """Parse ``xmin:xmax:xip,...``; raises ValueError naming the text when malformed."""
        try:
            xmin, xmax, xip = text.split(":")
            parsed = cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))
        except ValueError as exc:
            raise ValueError(f"malformed txid snapshot {text!r} (expected xmin:xmax:xip,...)") from exc
        if parsed.xmin > parsed.xmax or any(not parsed.xmin <= x < parsed.xmax for x in parsed.xip):
            raise ValueError(f"inconsistent txid snapshot {text!r} (needs xmin <= xip < xmax)")
        return parsed

    def covers(self, txid: int, position: str) -> bool:
        """Handoff rule: the transaction (txid, position of its BEGIN) is in the copy."""
        return self.visible(txid)

    def visible(self, txid: int) -> bool:
        """True when the changes of transaction txid are in a copy read under this snapshot."""
        if txid < self.xmin:
            return True
        if txid >= self.xmax:
            return False
        return txid not in self.xip

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(str(x) for x in sorted(self.xip))}"


@dataclass(frozen=True)
class ConsistentPoint:
    """The logical backend's handoff: the consistent point of a slot created with an exported
    snapshot. A transaction whose commit LSN is before it is in a copy read under that
    snapshot; one committed at or after it is not (and is decoded by the slot)."""

    lsn: Lsn

    @classmethod
    def parse(cls, text: str) -> "ConsistentPoint":
        """Parse PostgreSQL's ``X/Y`` LSN text; raises ValueError naming the text when malformed."""
        return cls(Lsn.parse(text))

    def covers(self, txid: int, position: str) -> bool:
        """Handoff rule: position (a ``pgshovel.position``, logical backend) is before the point."""
        return parse_header(position)[1] < self.lsn

    def __str__(self) -> str:
        return str(Lsn(self.lsn))


def parse_handoff(text: str) -> "TxidSnapshot | ConsistentPoint":
    """A handoff in its text form: ``X/Y`` (an LSN: logical backend) or ``xmin:xmax:xip,...``
    (a txid snapshot: trigger backend); raises ValueError naming the text when malformed."""
    return ConsistentPoint.parse(text) if "/" in text else TxidSnapshot.parse(text)


def handoff_point(handoff: dict) -> "TxidSnapshot | ConsistentPoint":
    """The handoff rule of a bootstrap manifest's ``handoff`` record (by its backend)."""
    if handoff.get("backend") == "logical":
        return ConsistentPoint.parse(handoff["lsn"])
    return TxidSnapshot.parse(handoff["txid_snapshot"])


def holds_snapshot_row(point: "TxidSnapshot | ConsistentPoint", copied_tables: "frozenset[str] | None",
                       table: str, position: str) -> bool:
    """Whether a bootstrap handing off at point holds a snapshot row (op ``r``) of table
    (``schema.table``, unquoted) at position (its ``pgshovel.position``): True when table is one
    of copied_tables (the tables the bootstrap copied; None: unknown, every table counts as
    copied) and, for a logical set's ConsistentPoint, the row was emitted before the point. A row
    of another table (added to the set later: its old rows come only from an online snapshot)
    or a logical row after the point (an online snapshot's, newer than the copy) is not held:
    consumers apply it like an upsert. The one rule of SetReader and the Spark materialize job."""
    if copied_tables is not None and table not in copied_tables:
        return False
    if isinstance(point, ConsistentPoint):
        return point.covers(0, position)
    return True
