"""One active relay per set: leader election in ZooKeeper (kazoo's Lock recipe).

Every relay of a set contends for the lock ``<set>/relay/election``; the
holder is active and writes an ephemeral ``<set>/relay/leader`` record
(identity, host, pid, since); the others wait in line and take over when the
holder's session ends (SIGKILL: after the ZooKeeper session timeout).

While active, the relay calls :meth:`Leadership.check` before it starts a
batch and before every Kafka commit:

- connection SUSPENDED: it pauses (no commit) until the session is back
  (CONNECTED: still the holder, go on) or LOST;
- session LOST: :class:`LeadershipLostError`; the lock node is gone, another
  relay may already be active, so this one stops producing and contends again.

Kafka's transactional fencing stays the last line: a relay that still commits
after losing the lock is fenced by its successor's ``init_transactions``.
"""

import logging
import os
import socket
import threading
import time
from typing import Any

from kazoo.protocol.states import KazooState

from pgshovel2 import redact
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import RelayError, StopRequestedError, UnavailableError
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)


class LeadershipLostError(RelayError):
    """The relay's ZooKeeper session ended: it is no longer the active relay of its set."""


class RepointedError(UnavailableError):
    """The set's database DSN changed in ZooKeeper (``pgshovel set repoint``): the relay is
    rebuilt on the new database (retryable: the position is in Kafka)."""


class SetDroppedError(RelayError):
    """The relay's set was dropped from ZooKeeper while it ran."""


def identity() -> str:
    """This process as a contender: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """A relay's claim on its set. acquire(), then check() while active, release() at the end."""

    def __init__(self, store: ClusterStore, set_name: str, who: str | None = None):
        self.store, self.set_name, self.who = store, set_name, who or identity()
        self.lock = store.election(set_name, self.who)
        self.since: float | None = None
        self._suspended = threading.Event()
        self._lost = threading.Event()
        self._dropped = threading.Event()
        self._back = threading.Event()
        self._released = threading.Event()
        self._seen_version: int | None = None
        self._seen_dsn: str | None = None
        self._repointed = threading.Event()
        self._stop = threading.Event()

    def _on_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._back.clear()
            self._suspended.set()
        elif state == KazooState.LOST:
            self._lost.set()
            self._back.set()
        else:
            self._suspended.clear()
            self._back.set()

    def _on_set(self, data: bytes | None, _stat: Any) -> bool | None:
        if self._released.is_set():
            return False  # this claim is over: stop watching (kazoo re-arms a watch until told)
        if data is None:
            self._dropped.set()
            return False  # stop watching
        record = SetRecord.from_node(data)
        version, dsn = record.version, redact.strip_dsn(record.relay_dsn)  # cluster secure strips passwords in place
        if self._seen_dsn is not None and dsn != self._seen_dsn:
            log.info("set %r was repointed to another database (version %s): the relay restarts on it",
                     self.set_name, version)
            self._repointed.set()
        self._seen_dsn = dsn
        if self._seen_version is not None and version != self._seen_version:
            log.info("set %r is now version %s in ZooKeeper: the relay switches at its marker in the stream",
                     self.set_name, version)
        self._seen_version = version
        return None

    def acquire(self, stop: threading.Event) -> bool:
        """Wait in line until this relay is the set's active relay; False if stop was set first.

        Raises SetDroppedError when the set does not exist. stop also ends waits of :meth:`check`.
        """
        self._stop = stop
        if not self.store.exists(self.set_name):
            raise SetDroppedError(f"no replication set {self.set_name!r} in cluster {self.store.cluster!r}")
        self.store.add_listener(self._on_state)
        waiting = threading.Event()
        waiting.set()
        threading.Thread(target=self._cancel_on_stop, args=(stop, waiting), daemon=True).start()
        others = [c for c in self.lock.contenders() if c != self.who]
        if others:
            log.info("standing by: relay %s of set %r is active", others[0], self.set_name)
        try:
            acquired = self.lock.acquire()
        except Exception:  # kazoo.exceptions.CancelledError on stop
            if stop.is_set():
                return False
            raise
        finally:
            waiting.clear()
        if not acquired or stop.is_set():
            self.release()
            return False
        self._forget_earlier_session()
        self.since = time.time()
        self.store.watch_set(self.set_name, self._on_set)
        self._publish()
        log.info("active relay of set %r (%s)", self.set_name, self.who)
        return True

    def _forget_earlier_session(self) -> None:
        """Forget a session that ended while this relay waited in line: kazoo's lock recipe went on
        in the new session, and this relay holds the lock there while its node exists. (Without
        this, the first check() would stop the relay it just made active.)"""
        if not self._lost.is_set():
            return
        self._lost.clear()
        self._suspended.clear()
        self._back.set()
        if self.store.zk.exists(f"{self.lock.path}/{self.lock.node}") is None:
            self._lost.set()  # this session ended too
        else:
            log.info("relay %s of set %r: its ZooKeeper session ended while it stood by; it holds the "
                     "lock in its new session", self.who, self.set_name)

    def _cancel_on_stop(self, stop: threading.Event, waiting: threading.Event) -> None:
        while waiting.is_set():
            if stop.wait(0.2):
                self.lock.cancel()
                return

    def _publish(self) -> None:
        # replaces a record left by a predecessor that released the lock but not its record
        self.store.put_relay_record(self.set_name, "leader", {"identity": self.who, "host": socket.gethostname(),
                                                             "pid": os.getpid(), "since": self.since}, ephemeral=True)

    def check(self) -> None:
        """Return if this relay may go on producing; pause while suspended.

        Raises LeadershipLostError (session lost) or SetDroppedError.
        """
        if self._dropped.is_set():
            raise SetDroppedError(f"set {self.set_name!r} was dropped: its relay stops")
        if self._repointed.is_set():
            self._repointed.clear()
            raise RepointedError(f"set {self.set_name!r} was repointed to another database")
        if self._suspended.is_set():
            log.warning("ZooKeeper connection suspended: relay of set %r pauses until it is back", self.set_name)
            waited = 0.0
            while not self._back.wait(0.5):
                if self._stop.is_set():
                    raise StopRequestedError(f"stopped while waiting for ZooKeeper (relay of set {self.set_name!r})")
                waited += 0.5
                if waited % 10 == 0:
                    log.warning("still waiting for ZooKeeper (relay of set %r paused)", self.set_name)
            if not self._lost.is_set():
                log.info("ZooKeeper connection back, same session: relay of set %r resumes", self.set_name)
        if self._lost.is_set():
            raise LeadershipLostError(f"the ZooKeeper session of relay {self.who} ended: it is no longer "
                                      f"the active relay of set {self.set_name!r}")

    def release(self) -> None:
        """Give up the lock (a standby takes over at once). Never raises."""
        self._released.set()
        self.store.remove_listener(self._on_state)
        try:
            if self.since is not None and not self._lost.is_set():
                self.store.delete_relay_record(self.set_name, "leader")
        except Exception:  # gone already, or ZooKeeper down: the session ends the record anyway
            pass
        try:
            self.lock.release()
        except Exception:
            pass


def status(store: ClusterStore, set_name: str) -> dict[str, Any]:
    """The set's relays: ``{"active": leader record or None, "contenders": [identity, ...]}``.

    contenders are in line order (the first holds the lock). Raises
    ClusterError if the set does not exist.
    """
    store.get_set(set_name)
    return {"active": store.get_relay_record(set_name, "leader"), "contenders": store.contenders(set_name)}
