"""Whether a logical set's slot survives a failover, from the primary and (optionally) a standby.

PostgreSQL 17+ copies a slot created with ``failover`` (pgshovel2 creates the set's slot so:
pgshovel2.backends.logical.create_slot_command) to a physical standby that runs with
``sync_replication_slots = on``; a promoted standby then holds the slot, at or behind the
primary's confirmed position, and the relay continues from it. With the primary's
``synchronized_standby_slots`` naming the standby's physical slot, no logical change is sent
to the relay before the standby has it, so Kafka never holds a transaction the standby lacks.
Below 17 slots are not copied: docs/runbooks.rst re-bootstraps the set.
"""

from typing import Any

import psycopg2

from pgshovel2 import redact
from pgshovel2.db import open_connection
from pgshovel2.errors import PgshovelError

FAILOVER_VERSION = 170000  # server_version_num from which slots can fail over (sync_replication_slots)

_PRIMARY_SQL = """
SELECT current_setting('server_version_num')::int, pg_is_in_recovery(),
       (SELECT setting FROM pg_settings WHERE name = 'synchronized_standby_slots'),
       (SELECT to_jsonb(s) ->> 'failover' FROM pg_replication_slots s WHERE s.slot_name = %s)
"""
_STANDBY_SQL = """
SELECT pg_is_in_recovery(), to_jsonb(s) ->> 'synced', s.temporary, s.confirmed_flush_lsn::text
FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = %s
"""


def _query(dsn: str, text: str, slot: str) -> tuple:
    conn = open_connection(dsn, "slot failover check", connect_timeout=5)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(text, (slot,))
            return cur.fetchone()
    finally:
        conn.close()


def _flag(text: str | None) -> bool | None:
    return None if text is None else text == "true"


def primary_facts(dsn: str, slot: str) -> dict[str, Any]:
    """{server_version (server_version_num), in_recovery, failover (bool, None: no slot or a
    server before 17), standby_slots (the synchronized_standby_slots names, [] when unset or
    before 17)} from the set's database, or {error} when it does not answer."""
    try:
        version, recovery, standby_slots, failover = _query(dsn, _PRIMARY_SQL, slot)
    except (psycopg2.Error, PgshovelError) as exc:
        return {"error": f"database {redact.dsn(dsn)} does not answer: {str(exc).strip()}"}
    names = [n.strip() for n in (standby_slots or "").split(",") if n.strip()]
    return {"server_version": version, "in_recovery": recovery, "failover": _flag(failover),
            "standby_slots": names}


def standby_facts(dsn: str, slot: str) -> dict[str, Any]:
    """{dsn (redacted), in_recovery, exists, synced, temporary, confirmed_flush_lsn} of slot on
    the standby at dsn, or {dsn, error} when it does not answer. synced/temporary: None when the
    slot is not there."""
    try:
        recovery, synced, temporary, confirmed = _query(dsn, _STANDBY_SQL, slot)
    except (psycopg2.Error, PgshovelError) as exc:
        return {"dsn": redact.dsn(dsn), "error": f"standby does not answer: {str(exc).strip()}"}
    return {"dsn": redact.dsn(dsn), "in_recovery": recovery, "exists": temporary is not None,
            "synced": _flag(synced), "temporary": temporary, "confirmed_flush_lsn": confirmed}


def slot_failover(dsn: str, slot: str, standby_dsn: str | None = None) -> dict[str, Any]:
    """primary_facts of the set's database, with ``standby``: standby_facts when standby_dsn
    is given (else None)."""
    out = primary_facts(dsn, slot)
    out["standby"] = None if standby_dsn is None else standby_facts(standby_dsn, slot)
    return out
