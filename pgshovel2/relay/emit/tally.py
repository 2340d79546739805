"""Per-table counts of what the relay produced, taken at each Kafka commit for the per-table metrics
(:func:`pgshovel2.relay.monitor.metrics.add_table_counts`: TABLE_CHANGES, TABLE_BYTES,
TABLE_LAST_RELAYED).

Counted per call, not per message, where the native lane wrote the changes (its ``tally``: per table
index [creates, updates, deletes, bytes]); per change on the Python path. Snapshot reads (op ``r``)
and TRUNCATEs are not changes here.
"""

_INDEX = {"I": 0, "U": 1, "D": 2, "c": 0, "u": 1, "d": 2}


class TableTally:
    """Changes by op and message bytes (keys and values) per table label (``schema.table``) since
    the last :meth:`take`."""

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

    def take(self) -> dict[str, list[int]]:
        """The counts since the last take, label -> [creates, updates, deletes, bytes], and start
        counting anew (called after a Kafka commit)."""
        counts, self._counts = self._counts, {}
        return counts
