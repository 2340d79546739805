"""Failpoints for fault-injection runs: ``PGSHOVEL2_FAILPOINTS=name=probability,...``.

At a named point, :func:`hit` SIGKILLs the process with the configured
probability, so a chaos run can kill the relay exactly where a crash is most
dangerous (e.g. between the Kafka commit and ``pgq.finish_batch``). Unset (the
normal case), a hit is one dict lookup.

``name=pause:DIR`` instead holds the process at the point, so a test can act
while it is there: the n-th hit (1, 2, ...) creates ``DIR/<name>.<n>.reached``
and waits until ``DIR/<name>.<n>.go`` exists (at most :data:`PAUSE_LIMIT`
seconds, then it goes on with a warning).
"""

import itertools
import logging
import os
import random
import signal
import time

log = logging.getLogger(__name__)
PAUSE_LIMIT = 300.0  # seconds a paused failpoint waits for its go file at most
_PAUSE = "pause:"


def _parse(spec: str) -> dict[str, float | str]:
    points: dict[str, float | str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        points[name] = value[len(_PAUSE):] if value.startswith(_PAUSE) else float(value or 1)
    return points


_POINTS = _parse(os.environ.get("PGSHOVEL2_FAILPOINTS", ""))
_HITS: dict[str, itertools.count] = {}  # name -> its pause hits so far


def hit(name: str) -> None:
    """SIGKILL this process with the probability configured for name (0 when unset), or pause
    here when name is configured as ``pause:DIR`` (module docstring)."""
    value = _POINTS.get(name)
    if isinstance(value, str):
        _pause(name, value)
    elif value and random.random() < value:
        log.warning("failpoint %s: killing the process", name)
        os.kill(os.getpid(), signal.SIGKILL)


def _pause(name: str, directory: str) -> None:
    base = os.path.join(directory, f"{name}.{next(_HITS.setdefault(name, itertools.count(1)))}")
    with open(f"{base}.reached", "w"):
        pass
    log.warning("failpoint %s: paused until %s.go exists", name, base)
    deadline = time.monotonic() + PAUSE_LIMIT
    while not os.path.exists(f"{base}.go"):
        if time.monotonic() > deadline:
            log.warning("failpoint %s: no %s.go after %.0fs; going on", name, base, PAUSE_LIMIT)
            return
        time.sleep(0.05)
