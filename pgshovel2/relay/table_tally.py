"""Per-table counts of what the relay produced, published to the per-table metrics at each Kafka
commit (pgshovel2.relay.metrics TABLE_CHANGES, TABLE_BYTES, TABLE_LAST_RELAYED).

Counted per call, not per message, where the native lane wrote the changes (its ``tally``: per table
index [creates, updates, deletes, bytes]); per change on the Python path. Snapshot reads (op ``r``)
and TRUNCATEs are not changes here.
"""

from pgshovel2.relay import metrics

OPS = ("c", "u", "d")
_INDEX = {"I": 0, "U": 1, "D": 2, "c": 0, "u": 1, "d": 2}


class TableTally:
    """Changes by op and message bytes (keys and values) per table label (``schema.table``) since
    the last :meth:`publish`."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}

    def add_lane(self, labels: list[str | None], tally: list[list[int]]) -> None:
        """A lane call's tally: per table index [c, u, d, bytes]; labels: per table index its label
        (None where the table has no lane: its entry is all zeros)."""
        for label, counts in zip(labels, tally, strict=True):
            if label is not None and any(counts):
                mine = self._counts.setdefault(label, [0, 0, 0, 0])
                for i, n in enumerate(counts):
                    mine[i] += n

    def add(self, label: str, op: str, nbytes: int) -> None:
        """One change of the Python path: op I/U/D (or c/u/d), nbytes of its messages."""
        mine = self._counts.setdefault(label, [0, 0, 0, 0])
        mine[_INDEX[op]] += 1
        mine[3] += nbytes

    def publish(self, set_name: str, at: float) -> None:
        """Add the counts to set_name's per-table metrics, at (Unix time, s) as each counted table's
        last relayed time, and start counting anew (called after a Kafka commit)."""
        for label, counts in self._counts.items():
            for op, n in zip(OPS, counts, strict=False):
                if n:
                    metrics.TABLE_CHANGES.labels(set_name, label, op).inc(n)
            metrics.TABLE_BYTES.labels(set_name, label).inc(counts[3])
            metrics.TABLE_LAST_RELAYED.labels(set_name, label).set(at)
        self._counts.clear()
