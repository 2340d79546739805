"""The relay's progress lines and lag metrics, at most every progress interval, and the relay's own
measure of how far behind its source it is (:class:`LagClock`)."""

import logging
import time
from collections.abc import Callable

from pgshovel2.relay.monitor import metrics
from pgshovel2.relay.source import Source

log = logging.getLogger(__name__)


class LagClock:
    """How long the oldest source transaction the relay has read and not yet acknowledged has waited
    since its commit (or capture) time: 0 when the relay has read everything and Kafka holds it, so an
    idle set shows no lag. Fed by the relay loop: :meth:`read` at each transaction read (its Begin's
    ts_ms), :meth:`acknowledged` after a Kafka commit, :meth:`idle` when the source had nothing more.
    clock: ms since the epoch (the source's timestamps come from the database's clock)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._waiting_since: int | None = None  # ts_ms of the oldest transaction read and not acknowledged
        self._last: int | None = None  # ts_ms of the latest transaction read
        self._caught_up = True

    def read(self, ts_ms: int) -> None:
        """A transaction with commit (capture) time ts_ms was read."""
        if self._waiting_since is None:
            self._waiting_since = ts_ms
        self._last, self._caught_up = ts_ms, False

    def acknowledged(self, open_ts_ms: int | None = None) -> None:
        """Kafka holds what was read, except the open transaction committed at open_ts_ms, if any."""
        self._waiting_since = open_ts_ms

    def idle(self) -> None:
        """The source had nothing more to read and nothing waits for a commit."""
        if self._waiting_since is None:
            self._caught_up = True

    def seconds(self) -> float:
        """The lag (s, >= 0): the oldest waiting transaction's age; between Kafka transactions while
        the source has more, the age of the latest one read; 0 once caught up."""
        since = self._waiting_since
        if since is None:
            if self._caught_up or self._last is None:
                return 0.0
            since = self._last
        return max(0.0, self._clock() - since / 1000)


class Progress:
    """Progress of one set's relay: a log line (changes, Kafka transactions, rate, the source's lag)
    and the lag gauges, at most every interval seconds; a warning when a logical set's slot retains
    more than warn_bytes of WAL. source: where the lag comes from (Source.lag, Source.describe)."""

    def __init__(self, set_name: str, source: Source, interval: float, warn_bytes: int,
                 lag_clock: LagClock | None = None):
        self.set_name, self.source, self.interval, self.warn_bytes = set_name, source, interval, warn_bytes
        self.lag_clock = lag_clock or LagClock()
        self._queue_seconds = 0.0  # trigger: the queue's lag at the last report
        self._started = self._last = time.monotonic()
        # computed at each scrape, so a relay held up anywhere shows its lag growing
        metrics.LAG_SECONDS.labels(set_name).set_function(self.lag_seconds)

    def lag_seconds(self) -> float:
        """The relay's lag (s): the larger of the queue's at the last report (trigger backend) and
        the age of the oldest transaction it read and Kafka does not hold yet (:class:`LagClock`)."""
        return max(self._queue_seconds, self.lag_clock.seconds())

    def report(self, changes: int, batches: int) -> None:
        """Report changes relayed in batches Kafka transactions so far, if interval has passed."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        lag = self.source.lag()
        rate = changes / max(now - self._started, 1e-6)
        if lag.bytes is not None:
            seconds = self.lag_seconds()
            metrics.SLOT_LAG_BYTES.labels(self.set_name).set(lag.bytes)
            metrics.SLOT_RETAINED_BYTES.labels(self.set_name).set(lag.retained_bytes or 0)
            log.info("relayed %d changes in %d Kafka transactions (%.0f changes/s); lag %.1fs; %s lags %d bytes, "
                     "retains %d bytes of WAL", changes, batches, rate, seconds, self.source.describe(), lag.bytes,
                     lag.retained_bytes)
            self._warn_retention(lag.retained_bytes or 0)
        else:
            self._queue_seconds = lag.seconds or 0.0
            metrics.LAG_EVENTS.labels(self.set_name).set(lag.events or 0)
            log.info("relayed %d changes in %d Kafka transactions (%.0f changes/s); queue lag %.1fs, %d events (%s)",
                     changes, batches, rate, lag.seconds or 0, lag.events or 0, self.source.describe())

    def _warn_retention(self, retained: int) -> None:
        if retained > self.warn_bytes:
            log.warning("%s retains %d MiB of WAL (warning above %d MiB): the relay is behind or was stopped; "
                        "PostgreSQL keeps this WAL until the slot confirms it (cap it with "
                        "max_slot_wal_keep_size, at the price of losing the slot)", self.source.describe(),
                        retained >> 20, self.warn_bytes >> 20)
