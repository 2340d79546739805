"""Failpoints for fault-injection runs: ``PGSHOVEL2_FAILPOINTS=name=probability,...``.

At a named point, :func:`hit` SIGKILLs the process with the configured
probability, so a chaos run can kill the relay exactly where a crash is most
dangerous (e.g. between the Kafka commit and ``pgq.finish_batch``). Unset (the
normal case), a hit is one dict lookup.
"""

import logging
import os
import random
import signal

log = logging.getLogger(__name__)


def _parse(spec: str) -> dict[str, float]:
    points = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, prob = item.partition("=")
        points[name] = float(prob or 1)
    return points


_POINTS = _parse(os.environ.get("PGSHOVEL2_FAILPOINTS", ""))


def hit(name: str) -> None:
    """SIGKILL this process with the probability configured for name (0 when unset)."""
    prob = _POINTS.get(name)
    if prob and random.random() < prob:
        log.warning("failpoint %s: killing the process", name)
        os.kill(os.getpid(), signal.SIGKILL)
