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

from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import RelayError, UnavailableError
from pgshovel2.relay.loop import Relay, RelayOptions

log = logging.getLogger(__name__)

RETRYABLE = (UnavailableError, psycopg2.OperationalError, psycopg2.InterfaceError, KafkaException,
             ConnectionLoss, SessionExpiredError, KazooTimeoutError)


@dataclass
class Totals:
    """Changes and batches relayed, and restarts after an interruption."""

    changes: int = 0
    batches: int = 0
    restarts: int = 0


def supervise(store: ClusterStore, set_name: str, options: RelayOptions, stop: threading.Event,
              max_backoff: float = 30.0) -> Totals:
    """Run the set's relay until stop is set, rebuilding it after retryable errors.

    Backoff starts at 1 s, doubles up to max_backoff (s), and resets after a
    minute of uninterrupted work. Non-retryable errors propagate.
    """
    totals, delay = Totals(), 1.0
    while not stop.is_set():
        relay, started = None, time.monotonic()
        try:
            relay = Relay(store, set_name, options)
            log.info("relaying set %r (version %d) from queue %s to %s", set_name, relay.set_version,
                     relay.queue, options.bootstrap)
            relay.run(stop)
        except RETRYABLE as exc:
            if isinstance(exc, KafkaException) and exc.args[0].fatal():
                raise RelayError(f"the Kafka producer failed fatally: {exc}") from exc
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
