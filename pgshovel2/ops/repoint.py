"""``pgshovel set repoint NAME --dsn NEW``: move a set to another database server that
holds the same data -- a promoted streaming replica of the set's database.

The new DSN is stored as the set's next version (``ClusterStore.update_set``, checked
against the znode version read first: a concurrent admin change makes it fail and
write nothing). Before that, the new database must be a primary (not in recovery)
holding what the set reads from -- a trigger set's PgQ queue and relay consumer (they
moved with the data: PgQ lives in tables); a logical set's replication slot (PostgreSQL
17+: a failover slot synced to the standby before its promotion, pgshovel2.backends.slot_failover)
and, with pgoutput, its publication -- and, when the old database still answers, the same
PostgreSQL system identifier (a physical copy), unless ``force``. A logical set whose slot
did not come along (PostgreSQL < 17) is refused unless ``rebootstrap``: the relay must then
create a new slot and snapshot (``--snapshot``) and consumers re-bootstrap (docs/runbooks.rst).
Active relays watch the set's znode and restart on the new database
(pgshovel2.relay.election.RepointedError); the queue or slot position comes along with the
data, the Kafka position from Kafka.
"""

from dataclasses import replace
from typing import Any

import psycopg2

from pgshovel2 import redact
from pgshovel2.backends import lifecycle
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import no_secret
from pgshovel2.db import open_connection
from pgshovel2.errors import ClusterError, PgshovelError
from pgshovel2.setrecord import SetRecord

_SLOT_SQL = ("SELECT to_jsonb(s) ->> 'synced', s.confirmed_flush_lsn::text FROM pg_replication_slots s "
             "WHERE s.slot_name = %s AND s.slot_type = 'logical'")


def _facts(dsn: str, record: SetRecord, timeout: int) -> dict[str, Any]:
    """{system_identifier, in_recovery, holds: what the set reads from is there (bool), slot:
    {synced, confirmed_flush_lsn} or None (logical sets)} of the database at dsn (psycopg2.Error if down)."""
    conn = open_connection(dsn, "set repoint", ClusterError, connect_timeout=timeout)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT system_identifier::text, pg_is_in_recovery() FROM pg_control_system()")
            ident, recovery = cur.fetchone()
            out = {"system_identifier": ident, "in_recovery": recovery, "slot": None}
            out["holds"] = lifecycle.holds(cur, record)
            if record.logical:
                cur.execute(_SLOT_SQL, (record.slot,))
                row = cur.fetchone()
                out["slot"] = None if row is None else {"synced": row[0] == "true", "confirmed_flush_lsn": row[1]}
        return out
    finally:
        conn.close()


def _slot_lines(name: str, slot_name: str, new: dict[str, Any], new_dsn: str, rebootstrap: bool) -> list[str]:
    """What the new database's copy of the set's slot allows; raises ClusterError when the relay
    could not continue and rebootstrap was not asked for."""
    slot = new["slot"]
    if slot is not None:
        origin = "synced from the old primary" if slot["synced"] else "NOT synced from the old primary"
        return [f"slot {slot_name} is on {redact.dsn(new_dsn)} ({origin}, confirmed up to "
                f"{slot['confirmed_flush_lsn']}): the relay continues from it"]
    if not rebootstrap:
        raise ClusterError(f"cannot repoint set {name!r}: {redact.dsn(new_dsn)} has no replication slot "
                           f"{slot_name}: it did not fail over (PostgreSQL before 17, or not synced to this "
                           "standby), so the relay cannot continue the set's stream. Repoint with --rebootstrap, "
                           "then run the relay once with --snapshot and re-bootstrap consumers (docs/runbooks.rst)")
    return [f"no slot {slot_name} on {redact.dsn(new_dsn)} (--rebootstrap): run the relay once with --snapshot "
            "(a new slot and snapshot), then re-bootstrap every consumer (docs/runbooks.rst)"]


def check_target(name: str, record: SetRecord, new_dsn: str, force: bool, rebootstrap: bool = False) -> list[str]:
    """Raise ClusterError unless new_dsn can take over set name; returns what was checked."""
    what = lifecycle.reads_from(record)
    try:
        new = _facts(new_dsn, record, 10)
    except psycopg2.Error as exc:
        raise ClusterError(f"cannot repoint set {name!r}: the new database {redact.dsn(new_dsn)} does not answer: "
                           f"{str(exc).strip()}") from exc
    if new["in_recovery"]:
        raise ClusterError(f"cannot repoint set {name!r}: {redact.dsn(new_dsn)} is still a standby "
                           "(in recovery): promote it first")
    if not new["holds"]:
        raise ClusterError(f"cannot repoint set {name!r}: {redact.dsn(new_dsn)} has no {what}: "
                           "it is not a copy of the set's database")
    done = [f"{redact.dsn(new_dsn)} is a primary with {what}"]
    if record.logical:
        done += _slot_lines(name, record.slot, new, new_dsn, rebootstrap)
    try:
        old = _facts(record.dsn, record, 3)
    except (psycopg2.Error, PgshovelError):
        return done + ["the old database does not answer: system identifiers not compared"]
    if old["system_identifier"] != new["system_identifier"] and not force:
        raise ClusterError(f"cannot repoint set {name!r}: {redact.dsn(new_dsn)} has system identifier "
                           f"{new['system_identifier']}, the current database {old['system_identifier']}: "
                           f"not a physical copy (use --force if it really holds the same {what})")
    return done + [f"same system identifier {new['system_identifier']} as the old database"]


def repoint_set(store: ClusterStore, name: str, new_dsn: str, force: bool = False,
                rebootstrap: bool = False) -> list[str]:
    """Store new_dsn as set name's database in its next version; returns lines for the operator.

    rebootstrap: accept, for a logical set, a database without the set's slot (check_target).
    Raises ClusterError (checks failed, no such set) or ConflictError (the set
    changed meanwhile); nothing is written then.
    """
    no_secret(new_dsn, "set repoint --dsn")
    record, znode_version = store.get_set(name)
    old_dsn = record.dsn
    if old_dsn == new_dsn:
        return [f"set {name!r} already uses {redact.dsn(new_dsn)}: nothing changed"]
    lines = check_target(name, record, new_dsn, force, rebootstrap)
    new_record = record.next(config=replace(record.config, dsn=new_dsn),
                             change={"kind": "repoint", "from": redact.dsn(old_dsn), "to": redact.dsn(new_dsn)})
    store.update_set(new_record, znode_version)
    return lines + [f"set {name!r}: version {record.version} -> {new_record.version}, database "
                    f"{redact.dsn(old_dsn)} -> {redact.dsn(new_dsn)}; running relays restart on it"]
