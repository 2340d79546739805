"""The operator's decision on a DDL the relay cannot follow compatibly (``pgshovel set accept-ddl``).

When the relay meets such a change -- a SchemaChangeError at an ``S`` event
(:mod:`pgshovel2.relay.ddl.schema_change`), or a key value the key layout a table kept cannot hold
(errors.KeyLayoutError) -- it commits everything before it, records where it stopped in
ZooKeeper (``relay/ddl_stop``: :func:`stop_record`) and waits there, active and leader still,
until ``relay/ddl_decision`` names that table and position (``pgshovel set accept-ddl``:
``{"table", "position", "mode": "schema" | "new-topic", "key", "by", "at", "reason",
"statement"}``). It then applies the decision exactly at the change, removes the stop record and
goes on; the set version the decision made records it (``change.accepted``), so a relay
restarted later replays the change into that version. A relay stopped (SIGTERM) or restarted
while it waits meets the change again and waits again, or finds the decision and goes on.
"""

import logging
import threading
import time

from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import StopRequestedError
from pgshovel2.relay.ddl.schema_change import NEW_TOPIC, SCHEMA
from pgshovel2.relay.election import Leadership, identity

log = logging.getLogger(__name__)

STOP, DECISION = "ddl_stop", "ddl_decision"  # the relay records (ClusterStore.get_relay_record keys)
MODES = (SCHEMA, NEW_TOPIC)
POLL_SECONDS = 1.0


def stop_record(table: str, statement: str, reason: str, key_change: bool, position: str, txid: int, unit: int,
                ordinal: int, message: str, kind: str = "ddl") -> dict:
    """The ``relay/ddl_stop`` record: where the relay waits (position: the change's
    ``pgshovel.position``; kind ``ddl`` for a schema-change event, ``key`` for a key value that
    no longer fits), why, and the message with the remedy."""
    return {"kind": kind, "table": table, "statement": statement, "reason": reason, "key_change": key_change,
            "position": position, "txid": txid, "unit": unit, "ordinal": ordinal, "message": message,
            "since": time.time(), "relay": identity()}


def matches(decision: dict | None, stop: dict) -> bool:
    """Whether decision is the one for the change stop describes (same table and position) and
    covers it (a key change only with a new topic)."""
    if decision is None or (decision.get("table"), decision.get("position")) != (stop["table"], stop["position"]):
        return False
    return decision.get("mode") == NEW_TOPIC or (decision.get("mode") == SCHEMA and not stop["key_change"])


class DdlGate:
    """Waits for the operator's decision (module docstring). stop: the relay's stop request, which
    ends a wait (StopRequestedError); leadership: checked while waiting (a relay that lost it
    stops: LeadershipLostError)."""

    def __init__(self, store: ClusterStore, set_name: str, stop: threading.Event | None = None,
                 leadership: Leadership | None = None, poll: float = POLL_SECONDS):
        self.store, self.set_name, self.leadership, self.poll = store, set_name, leadership, poll
        self.stop = stop or threading.Event()

    def decision(self, stop: dict) -> dict | None:
        """The operator's decision for the change stop describes, if there is one."""
        found = self.store.get_relay_record(self.set_name, DECISION)
        return found if matches(found, stop) else None

    def decide(self, stop: dict) -> dict:
        """The decision for the change stop describes: waited for (stop recorded meanwhile) when
        there is none yet. Raises StopRequestedError when the relay is asked to stop first."""
        found = self.decision(stop)
        if found is not None:  # decided while no relay waited (one that waited before, then stopped)
            log.warning("DDL on %s at %s: the operator's decision (%s, by %s) applies", stop["table"], stop["position"],
                        found.get("mode"), found.get("by"))
            self.store.delete_relay_record(self.set_name, STOP)
            return found
        self.store.put_relay_record(self.set_name, STOP, stop)
        log.error("%s", stop["message"])
        log.error("waiting for the operator's decision on the DDL on %s at %s (pgshovel set accept-ddl)",
                  stop["table"], stop["position"])
        while True:
            if self.stop.wait(self.poll):
                raise StopRequestedError(f"stopped while waiting for a decision on the DDL on {stop['table']} at "
                                         f"{stop['position']}; the next start waits there again")
            if self.leadership is not None:
                self.leadership.check()
            found = self.decision(stop)
            if found is not None:
                log.warning("DDL on %s at %s accepted by %s: %s", stop["table"], stop["position"], found.get("by"),
                            found.get("mode"))
                self.store.delete_relay_record(self.set_name, STOP)
                return found
