"""When the relay loop ends its open Kafka transaction at a complete point (pgshovel2.relay.loop's
docstring): once the source's commit_delay has passed since the transaction's first complete point
while the relay keeps up, once busy_commit_delay has passed while it works through a backlog, and
at once when the source has no more after the loop slept out commit_delay."""

import time

# s: a point whose source commit is older than this (or busy_commit_delay) is relayed from a backlog.
# Not just busy_commit_delay: a relay only slightly behind (a loaded host) would then hold every
# Kafka transaction that long and lengthen its latency tail.
BACKLOG_SECONDS = 1.0


class CommitClock:
    """The timing of the open Kafka transaction. commit_delay: the source's (s; 0: commit at
    once); busy_commit_delay: RelayOptions' (s). slept: the loop slept out commit_delay (Relay._idle);
    drained: the source went idle since, inside a source transaction."""

    def __init__(self, commit_delay: float, busy_commit_delay: float):
        self.commit_delay = commit_delay
        self.busy_delay = max(commit_delay, busy_commit_delay)
        self._backlog_ms = 1000 * max(BACKLOG_SECONDS, self.busy_delay)
        self.reset()

    def reset(self) -> None:
        """A new Kafka transaction: no complete point in it yet."""
        self.ready_at, self.slept, self.drained = 0.0, False, False

    def complete_point(self) -> None:
        """A complete point came; the first one of the Kafka transaction starts the clock."""
        if not self.ready_at:
            self.ready_at = time.monotonic()

    def open_for(self) -> float:
        """Seconds since the first complete point of the open Kafka transaction."""
        return time.monotonic() - self.ready_at

    def delay_left(self) -> float:
        """Seconds of commit_delay left (≤ 0: none)."""
        return self.commit_delay - self.open_for()

    def due(self, ts_ms: int) -> bool:
        """Whether a complete point the source delivered without an Idle (it may have more, see
        Relay._idle), whose source commit was at ts_ms (ms since the epoch, the database's clock),
        ends the Kafka transaction now: after the source's commit_delay, or after busy_commit_delay
        while relaying a backlog. After the loop slept out commit_delay, what came meanwhile is
        read until the source has no more (an Idle, outside a source transaction or before the end
        of this one) or twice commit_delay has passed."""
        if self.drained:
            return True
        open_for = self.open_for()
        if open_for >= self.busy_delay:
            return True
        if open_for < (2 if self.slept else 1) * self.commit_delay:
            return False
        return time.time() * 1000 - ts_ms < self._backlog_ms  # the source is not behind
