"""The relay's connection state to the services it depends on: Kafka, PostgreSQL and the schema
registry, for ``set status`` (ZooKeeper ``relay/connections``) and Prometheus
(``pgshovel2_relay_connection_up{dependency}``); and, as ``heartbeat``, whether a logical set's
heartbeat action query succeeds (pgshovel2.relay.monitor.heartbeat).

A dependency is up or down since a time, with the last error seen on it and when. The state is
fed by those who see it: the Kafka producer's error events (librdkafka's broker state: all
brokers down, connection refused, name resolution, authentication) and its successful calls
(init_transactions, commits); the database connections (a relay built: up; an outage error:
down); the registry client (a failed request: down, an answered one: up). The record in
ZooKeeper is rewritten only when a state CHANGES (up <-> down, or the first error of an outage),
never per batch, so ZooKeeper writes stay rare; repeating the same error changes nothing.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pgshovel2 import redact
from pgshovel2.relay.monitor import metrics

log = logging.getLogger(__name__)

KAFKA, POSTGRESQL, REGISTRY = "kafka", "postgresql", "registry"
HEARTBEAT = "heartbeat"  # a logical set's heartbeat action query (pgshovel2.relay.monitor.heartbeat)
DEPENDENCIES = (KAFKA, POSTGRESQL, REGISTRY, HEARTBEAT)
RECORD = "connections"  # the relay record (ZooKeeper /pgshovel2/<cluster>/sets/<set>/relay/connections)


class Connections:
    """The connection states of one set's relay (thread-safe: librdkafka's error events may come
    from another thread than the relay loop).

    publish(record): keeps the whole record (``{"relay": identity, "at": s, DEPENDENCY: {"up": bool,
    "since": s, "error": str | None, "error_at": s | None}}``, times in seconds since the epoch)
    where ``set status`` reads it; called on every change of state, never for a repeat. It must
    not raise for ZooKeeper trouble (see :func:`zookeeper_publisher`). clock: epoch seconds.
    """

    def __init__(self, set_name: str, relay: str, publish: Callable[[dict[str, Any]], None],
                 clock: Callable[[], float] = time.time):
        self.set_name, self.relay, self._publish, self._clock = set_name, relay, publish, clock
        self._states: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def up(self, dependency: str) -> None:
        """dependency answered: up (published only when it was down or unknown). Cheap when it was
        up already: the relay calls it at every Kafka commit."""
        state = self._states.get(dependency)
        if state is not None and state["up"]:
            return
        with self._lock:
            state = self._states.get(dependency)
            if state is not None and state["up"]:
                return
            now = self._clock()
            self._states[dependency] = {"up": True, "since": now, "error": (state or {}).get("error"),
                                        "error_at": (state or {}).get("error_at")}
            record = self._record(now)
        metrics.CONNECTION_UP.labels(self.set_name, dependency).set(1)
        log.info("%s connection of set %r is up", dependency, self.set_name)
        self._publish(record)

    def down(self, dependency: str, error: str) -> None:
        """dependency failed with error (its text, secrets masked here): down since now, or since
        when it went down; published only when it was up or unknown, or had no error yet."""
        error = redact.text(error.strip())[:1000]
        with self._lock:
            state = self._states.get(dependency)
            if state is not None and not state["up"] and state["error"]:
                return  # the same outage: its first error stands, no write
            now = self._clock()
            since = state["since"] if state is not None and not state["up"] else now
            self._states[dependency] = {"up": False, "since": since, "error": error, "error_at": now}
            record = self._record(now)
        metrics.CONNECTION_UP.labels(self.set_name, dependency).set(0)
        self._publish(record)

    def state(self, dependency: str) -> dict[str, Any] | None:
        """A copy of dependency's state (see the class), None when never seen."""
        with self._lock:
            state = self._states.get(dependency)
            return None if state is None else dict(state)

    def _record(self, now: float) -> dict[str, Any]:
        return {"relay": self.relay, "at": now, **{k: dict(v) for k, v in self._states.items()}}


def zookeeper_publisher(put: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """A publish for :class:`Connections` writing with put (e.g. the set's relay record
    :data:`RECORD`), best effort: ZooKeeper may be what is down, and the state is logged anyway."""

    def publish(record: dict[str, Any]) -> None:
        try:
            put(record)
        except Exception:  # noqa: BLE001 -- ZooKeeper down or the set gone: nothing to keep it in
            log.debug("could not record the connection state in ZooKeeper", exc_info=True)

    return publish


def lines(record: dict[str, Any] | None, active: str | None, now: float | None = None) -> list[str]:
    """``set status``'s lines for a ``relay/connections`` record (None: no relay reported one yet);
    active: the identity of the set's active relay (a record of another relay is marked stale)."""
    if record is None:
        return []
    now = time.time() if now is None else now
    stale = "" if record.get("relay") == active else f" (reported by relay {record.get('relay')}, not active now)"
    out = []
    for dependency in DEPENDENCIES:
        state = record.get(dependency)
        if state is None:
            continue
        since = f"since {_when(state['since'])} ({max(now - state['since'], 0):.0f}s)"
        ok, failed = ("succeeds", "FAILS") if dependency == HEARTBEAT else ("up", "DOWN")
        text = f"{ok} {since}" if state["up"] else f"{failed} {since}: {state['error']}"
        if state["up"] and state.get("error"):
            text += f"; last error at {_when(state['error_at'])}: {state['error'][:200]}"
        out.append(f"  {'relay-' + dependency + ':':17} {text}{stale}")
    return out


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
