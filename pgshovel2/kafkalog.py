"""librdkafka's log lines and error events, folded: one line per distinct message, then quiet for a
minute, however often librdkafka repeats it.

A client that cannot reach its broker reports the failed connection at every retry (every second
or faster) and alternates "1/1 brokers are down" with "0/1 brokers are down"; at 3 a.m. that is a
screen of noise around the one line that matters. :class:`Fold` keys a message by its text with
every number and librdkafka's "(after N ms in state X, ...)" tail taken out, lets the first one of a
key through, and counts the repeats of the next ``window`` seconds into the next line of that key.
:data:`LIBRDKAFKA` is the logger confluent_kafka's clients are given (``logger``), with a
:class:`FoldFilter`; the native producer folds its own lines the same way (native/src/kafka_reports.rs).
"""

import logging
import re
import threading
import time
from collections.abc import Callable

WINDOW = 60.0  # s a repeated message stays folded
_TAIL = re.compile(r"\s*\(after \d+ms in state .*\)$")
_NUMBER = re.compile(r"\d+")


def fold_key(text: str) -> str:
    """The text librdkafka repeats, without the parts that change between repeats: numbers (ports,
    counts, ms) become "N" and the "(after N ms in state X)" tail goes."""
    return _NUMBER.sub("N", _TAIL.sub("", text))


class Fold:
    """Decides which of a stream of messages to log (thread-safe): the first of each fold_key, and
    then the next one of it only after window seconds, saying how many were left out meanwhile.
    clock: monotonic seconds."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic):
        self.window, self._clock = window, clock
        self._seen: dict[str, tuple[float, int]] = {}  # key -> (when last let through, left out since)
        self._lock = threading.Lock()

    def admit(self, text: str) -> str | None:
        """The line to log for text (text, or text with the count of repeats left out since the last
        one of its kind), or None: a repeat within the window."""
        key, now = fold_key(text), self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.window:
                self._seen[key] = (last[0], last[1] + 1)
                return None
            self._seen[key] = (now, 0)
        if last is None or not last[1]:
            return text
        return f"{text} (and {last[1]} like it in the last {now - last[0]:.0f}s)"


class FoldFilter(logging.Filter):
    """A logging filter folding its records' messages (:class:`Fold`)."""

    def __init__(self, window: float = WINDOW):
        super().__init__()
        self.fold = Fold(window)

    def filter(self, record: logging.LogRecord) -> bool:
        line = self.fold.admit(record.getMessage())
        if line is None:
            return False
        record.msg, record.args = line, ()
        return True


LIBRDKAFKA = logging.getLogger("pgshovel2.kafka.librdkafka")
LIBRDKAFKA.addFilter(FoldFilter())
