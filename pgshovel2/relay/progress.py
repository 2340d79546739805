"""The relay's progress lines and lag metrics, at most every progress interval."""

import logging
import time

from pgshovel2.relay import metrics
from pgshovel2.relay.source import Source

log = logging.getLogger(__name__)


class Progress:
    """Progress of one set's relay: a log line (changes, Kafka transactions, rate, the source's lag)
    and the lag gauges, at most every interval seconds; a warning when a logical set's slot retains
    more than warn_bytes of WAL. source: where the lag comes from (Source.lag, Source.describe)."""

    def __init__(self, set_name: str, source: Source, interval: float, warn_bytes: int):
        self.set_name, self.source, self.interval, self.warn_bytes = set_name, source, interval, warn_bytes
        self._started = self._last = time.monotonic()

    def report(self, changes: int, batches: int) -> None:
        """Report changes relayed in batches Kafka transactions so far, if interval has passed."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        lag = self.source.lag()
        rate = changes / max(now - self._started, 1e-6)
        if lag.bytes is not None:
            metrics.SLOT_LAG_BYTES.labels(self.set_name).set(lag.bytes)
            log.info("relayed %d changes in %d Kafka transactions (%.0f changes/s); %s lags %d bytes, retains "
                     "%d bytes of WAL", changes, batches, rate, self.source.describe(), lag.bytes,
                     lag.retained_bytes)
            self._warn_retention(lag.retained_bytes or 0)
        else:
            metrics.LAG_SECONDS.labels(self.set_name).set(lag.seconds or 0)
            metrics.LAG_EVENTS.labels(self.set_name).set(lag.events or 0)
            log.info("relayed %d changes in %d Kafka transactions (%.0f changes/s); queue lag %.1fs, %d events (%s)",
                     changes, batches, rate, lag.seconds or 0, lag.events or 0, self.source.describe())

    def _warn_retention(self, retained: int) -> None:
        if retained > self.warn_bytes:
            log.warning("%s retains %d MiB of WAL (warning above %d MiB): the relay is behind or was stopped; "
                        "PostgreSQL keeps this WAL until the slot confirms it (cap it with "
                        "max_slot_wal_keep_size, at the price of losing the slot)", self.source.describe(),
                        retained >> 20, self.warn_bytes >> 20)
