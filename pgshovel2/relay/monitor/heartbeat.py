"""Runs a logical set's heartbeat action query (set config ``heartbeat.action_query``,
pgshovel2.heartbeatconf) while this process is the set's active relay.

A daemon thread runs the statement every ``heartbeat.interval`` seconds, in a connection of its
own (the relay role's, ``SetRecord.relay_dsn``; autocommit, application_name ``pgshovel2 relay
heartbeat <set>``) with ``search_path`` pinned to ``pg_catalog, pg_temp`` (the statement names its
tables with their schema) and a statement_timeout of the interval or 60 s, whichever is longer.
A failure is never fatal: it is logged (the first of a run of failures, and the recovery) and
reported as the relay's ``heartbeat`` state (pgshovel2.relay.monitor.connections: ``set status`` shows it
with its error and time); the connection is opened again at the next run.
"""

import logging
import threading

import psycopg2

from pgshovel2.db import close_quietly, open_connection
from pgshovel2.errors import UnavailableError
from pgshovel2.heartbeatconf import HeartbeatConfig
from pgshovel2.relay.monitor.connections import HEARTBEAT, Connections

log = logging.getLogger(__name__)


class HeartbeatAction:
    """The action query of set set_name on dsn (config: its heartbeat), reporting to states.
    start() the thread, stop() it (waits for a run in progress to end, at most its timeout)."""

    def __init__(self, set_name: str, dsn: str, config: HeartbeatConfig, states: Connections):
        if config.action_query is None:
            raise ValueError(f"set {set_name!r} has no heartbeat action query")
        self.set_name, self.dsn, self.config, self.states = set_name, dsn, config, states
        self._stop = threading.Event()
        self._conn = None
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{set_name}", daemon=True)
        self.runs = 0  # statements that succeeded

    def start(self) -> None:
        """Start running the statement (the first run after one interval)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connection (never raises)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(max(self.config.interval, 60.0) + 5)
        self._close()

    def _loop(self) -> None:
        while not self._stop.wait(self.config.interval):
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 -- reported, never fatal: the relay goes on
                self._failed(exc)

    def run_once(self) -> None:
        """Run the statement once (connecting first when needed); raises what it raised."""
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        with self._conn.cursor() as cur:
            cur.execute(self.config.action_query)
        self.runs += 1
        if (self.states.state(HEARTBEAT) or {}).get("up") is False:
            log.info("heartbeat action query of set %r succeeds again", self.set_name)
        self.states.up(HEARTBEAT)

    def _connect(self):
        timeout_ms = int(max(self.config.interval, 60.0) * 1000)
        conn = open_connection(self.dsn, f"set {self.set_name!r} (heartbeat)", UnavailableError,
                               application_name=f"pgshovel2 relay heartbeat {self.set_name}"[:63])
        conn.autocommit = True
        try:  # SET, not libpq's options: those would replace the DSN's own (a pooler's endpoint=...)
            with conn.cursor() as cur:
                cur.execute("SET search_path = pg_catalog, pg_temp")
                cur.execute("SET statement_timeout = %s", (timeout_ms,))
        except psycopg2.Error:
            close_quietly(conn)
            raise
        return conn

    def _failed(self, exc: Exception) -> None:
        first = (self.states.state(HEARTBEAT) or {}).get("up") is not False
        text = f"heartbeat action query of set {self.set_name!r} failed: {str(exc).strip() or type(exc).__name__}"
        if first:
            log.error("%s; the relay goes on, the query runs again in %gs", text, self.config.interval)
        self.states.down(HEARTBEAT, text)
        if isinstance(exc, psycopg2.Error):
            self._close()  # a failed or broken connection: a new one at the next run

    def _close(self) -> None:
        close_quietly(self._conn)
        self._conn = None
