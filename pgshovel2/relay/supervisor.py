"""Keeps a set's relay running across outages of the services it uses.

Restarting a relay is always safe (it resumes from the position committed in
Kafka), so on a lost database or Kafka connection the supervisor rebuilds the
relay and retries with exponential backoff, logging each interruption. It
gives up only on errors a retry cannot fix: fenced by another relay, bad
configuration, a value that cannot be encoded.
"""

import logging
import threading
import time
from dataclasses import dataclass

import psycopg2
from confluent_kafka import KafkaException
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from pgshovel2 import redact
from pgshovel2.cluster import ClusterStore
from pgshovel2.db import outage
from pgshovel2.errors import FencedError, RelayError, StopRequestedError, UnavailableError
from pgshovel2.relay.build import build
from pgshovel2.relay.election import Leadership, LeadershipLostError, SetDroppedError, identity
from pgshovel2.relay.monitor import connections, metrics
from pgshovel2.relay.monitor.connections import Connections
from pgshovel2.relay.monitor.heartbeat import HeartbeatAction
from pgshovel2.relay.options import RelayOptions

log = logging.getLogger(__name__)

RETRYABLE = (UnavailableError, psycopg2.OperationalError, psycopg2.InterfaceError, KafkaException,
             ConnectionLoss, SessionExpiredError, KazooTimeoutError)


@dataclass
class Totals:
    """Changes and batches relayed, and restarts after an interruption."""

    changes: int = 0
    batches: int = 0
    restarts: int = 0


def record_error(store: ClusterStore, set_name: str, exc: Exception) -> None:
    """Keep the set's latest relay error in ZooKeeper (``relay/last_error``) for ``set status``,
    its secrets masked (pgshovel2.redact.text: a registry URL's user info, a DSN's password).

    Best effort: ZooKeeper may be what failed, and the error is logged anyway.
    """
    try:
        message = redact.text(str(exc).strip())[:2000]
        store.put_relay_record(set_name, "last_error", {"at": time.time(), "kind": type(exc).__name__,
                                                        "message": message, "relay": identity()})
    except Exception:  # ZooKeeper down or the set gone: nothing to keep it in
        log.debug("could not record the error in ZooKeeper", exc_info=True)


def dropped(store: ClusterStore, set_name: str, exc: BaseException) -> SetDroppedError | None:
    """The error to stop with when exc happened because the set was dropped meanwhile (its
    queue or slot went with it), else None. Best effort: ZooKeeper may be down too."""
    try:
        if store.exists(set_name):
            return None
    except Exception:  # ZooKeeper unreachable: exc stands as it is
        return None
    return SetDroppedError(f"set {set_name!r} was dropped: its relay stops ({str(exc).strip()[:200]})")


def connections_of(store: ClusterStore, set_name: str) -> Connections:
    """The connection states of this process's relay of set_name, kept in ZooKeeper
    (``relay/connections``, best effort) for ``set status``."""
    put = lambda record: store.put_relay_record(set_name, connections.RECORD, record)  # noqa: E731
    return Connections(set_name, identity(), connections.zookeeper_publisher(put))


def supervise(store: ClusterStore, set_name: str, options: RelayOptions, stop: threading.Event,
              leadership: Leadership | None = None, totals: Totals | None = None,
              max_backoff: float = 30.0, states: Connections | None = None) -> Totals:
    """Run the set's relay until stop is set, rebuilding it after retryable errors.

    leadership: the relay's election claim (checked before batches and
    commits), None to run without an election. Backoff starts at 1 s, doubles
    up to max_backoff (s), and resets after a minute of uninterrupted work.
    states: the relay's connection states (pgshovel2.relay.monitor.connections; a new one kept in ZooKeeper
    when None). Non-retryable errors propagate (LeadershipLostError among them).
    """
    totals, delay = totals or Totals(), 1.0
    states = states or connections_of(store, set_name)
    while not stop.is_set():
        relay, started = None, time.monotonic()
        try:
            if leadership is not None:
                leadership.check()
            relay = build(store, set_name, options, leadership, stop, states)
            log.info("relaying set %r (version %d) from %s to %s", set_name, relay.layout.version,
                     relay.source.describe(), options.bootstrap)
            relay.run(stop)
        except SetDroppedError:
            raise
        except StopRequestedError as exc:
            log.info("%s", exc)
            break
        except Exception as exc:
            if (gone := dropped(store, set_name, exc)) is not None:
                raise gone from exc
            if _fenced_while_active(store, set_name, exc, leadership):
                exc = UnavailableError(f"fenced by a stale Kafka producer of a former relay, while still the active "
                                       f"relay of set {set_name!r} ({exc}); re-initializing the producer")
            elif not isinstance(exc, RETRYABLE):
                raise
            if isinstance(exc, KafkaException) and exc.args[0].fatal():  # counted by run_elected
                raise RelayError(f"the Kafka producer failed fatally: {exc}") from exc
            metrics.error(set_name, exc)
            record_error(store, set_name, exc)
            if (dependency := dependency_of(exc)) is not None:
                states.down(dependency, str(exc))
            if time.monotonic() - started > 60:
                delay = 1.0
            totals.restarts += 1
            log.error("relay of set %r interrupted: %s; restarting from the committed position in %.0fs",
                      set_name, str(exc).strip(), delay)
            stop.wait(delay)
            delay = min(delay * 2, max_backoff)
        finally:
            if relay is not None:
                totals.changes += relay.changes
                totals.batches += relay.batches
    return totals


def heartbeat_action(store: ClusterStore, set_name: str, states: Connections) -> HeartbeatAction | None:
    """The set's heartbeat action query (pgshovel2.relay.monitor.heartbeat), started; None when its
    config has none. Its config is read when this relay becomes active."""
    record, _ = store.get_set(set_name)
    config = record.config.heartbeat
    if config.action_query is None:
        return None
    action = HeartbeatAction(set_name, record.relay_dsn, config, states)
    action.start()
    log.info("running the heartbeat action query of set %r every %gs", set_name, config.interval)
    return action


def dependency_of(exc: BaseException) -> str | None:
    """The dependency whose outage exc is (connections.POSTGRESQL for a database error in its chain
    of causes, connections.KAFKA for a Kafka one), None when it tells no such thing (e.g. ZooKeeper's,
    or a registry's, which its client reports itself)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg2.Error):
            return connections.POSTGRESQL if outage(seen) else None
        if isinstance(seen, KafkaException):
            return connections.KAFKA
        seen = seen.__cause__ or seen.__context__
    return None


def _fenced_while_active(store: ClusterStore, set_name: str, exc: Exception, leadership: Leadership | None) -> bool:
    """True for a FencedError while this relay still holds the set's lock (the first contender in
    ZooKeeper): a former active relay, stopped in the middle of initializing its Kafka producer and
    resumed after this one took over, finished that initialization late and bumped the
    transactional epoch. This relay then restarts from the committed position, and its new
    producer fences the stale one back. Without an election a FencedError always stops the relay.
    Raises LeadershipLostError (the session ended: stand by) or SetDroppedError from
    leadership.check()."""
    if not isinstance(exc, FencedError) or leadership is None:
        return False
    try:
        leadership.check()
    except (UnavailableError, StopRequestedError):  # repointed, or stopping: the restart handles it
        return True
    try:
        return store.contenders(set_name)[:1] == [leadership.who]
    except Exception:  # ZooKeeper unreachable: not known to be active, the fence stands
        return False


def run_elected(store: ClusterStore, set_name: str, options: RelayOptions, stop: threading.Event) -> Totals:
    """Contend for the set's leadership and relay while active, until stop is set.

    A relay whose ZooKeeper session ended stops producing and contends again.
    Raises what :func:`supervise` cannot retry (fenced by an active relay, bad config, set dropped).
    """
    totals, states = Totals(), connections_of(store, set_name)
    while not stop.is_set():
        leadership = Leadership(store, set_name)
        try:
            if not leadership.acquire(stop):
                break
            metrics.ACTIVE.labels(set_name).set(1)
            action = heartbeat_action(store, set_name, states)
            try:
                supervise(store, set_name, options, stop, leadership, totals, states=states)
            finally:
                if action is not None:
                    action.stop()
        except LeadershipLostError as exc:
            metrics.error(set_name, exc)
            record_error(store, set_name, exc)
            log.error("%s: stopped producing; standing by to take over again", exc)
        except BaseException as exc:
            metrics.error(set_name, exc)
            if isinstance(exc, Exception):
                record_error(store, set_name, exc)
            raise
        finally:
            metrics.ACTIVE.labels(set_name).set(0)
            leadership.release()
    return totals
