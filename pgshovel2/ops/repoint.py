"""``pgshovel set repoint NAME --dsn NEW``: move a set to another database server that
holds the same data -- a promoted streaming replica of the set's database.

The new DSN is stored as the set's next version (``ClusterStore.update_set``, checked
against the znode version read first: a concurrent admin change makes it fail and
write nothing). Before that, the new database must be a primary (not in recovery)
with the set's PgQ queue and relay consumer (they moved with the data: PgQ lives in
tables), and -- when the old database still answers -- the same PostgreSQL system
identifier (a physical copy), unless ``force``. Active relays watch the set's znode
and restart on the new database (pgshovel2.relay.election.RepointedError); the
queue position comes along with the data, the Kafka position from Kafka.
"""

from dataclasses import replace
from typing import Any

import psycopg2

from pgshovel2.cluster import ClusterStore
from pgshovel2.db import redacted
from pgshovel2.errors import ClusterError
from pgshovel2.setrecord import SetRecord, TriggerCapture


def _facts(dsn: str, capture: TriggerCapture, timeout: int) -> dict[str, Any]:
    """{system_identifier, in_recovery, consumer: bool} of the database at dsn (psycopg2.Error if down)."""
    conn = psycopg2.connect(dsn, connect_timeout=timeout)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT system_identifier::text, pg_is_in_recovery() FROM pg_control_system()")
            ident, recovery = cur.fetchone()
            cur.execute("SELECT to_regprocedure('pgq.get_consumer_info(text,text)') IS NOT NULL")
            has_pgq = cur.fetchone()[0]
            consumer = False
            if has_pgq:
                cur.execute("SELECT count(*) FROM pgq.get_consumer_info() WHERE queue_name = %s "
                            "AND consumer_name = %s", (capture.queue, capture.consumer))
                consumer = cur.fetchone()[0] == 1
        return {"system_identifier": ident, "in_recovery": recovery, "consumer": consumer}
    finally:
        conn.close()


def check_target(name: str, record: SetRecord, new_dsn: str, force: bool) -> list[str]:
    """Raise ClusterError unless new_dsn can take over set name; returns what was checked."""
    capture = record.capture
    if not isinstance(capture, TriggerCapture):
        raise ClusterError(f"cannot repoint set {name!r}: it is a logical set, whose replication slot does not "
                           "move with a physical copy on PostgreSQL 15; re-bootstrap it instead (docs/runbooks.rst)")
    queue, consumer = capture.queue, capture.consumer
    try:
        new = _facts(new_dsn, capture, 10)
    except psycopg2.Error as exc:
        raise ClusterError(f"cannot repoint set {name!r}: the new database {redacted(new_dsn)} does not answer: "
                           f"{str(exc).strip()}") from exc
    if new["in_recovery"]:
        raise ClusterError(f"cannot repoint set {name!r}: {redacted(new_dsn)} is still a standby "
                           "(in recovery): promote it first")
    if not new["consumer"]:
        raise ClusterError(f"cannot repoint set {name!r}: {redacted(new_dsn)} has no queue {queue} with consumer "
                           f"{consumer}: it is not a copy of the set's database")
    done = [f"{redacted(new_dsn)} is a primary with queue {queue} and consumer {consumer}"]
    try:
        old = _facts(record.dsn, capture, 3)
    except psycopg2.Error:
        return done + ["the old database does not answer: system identifiers not compared"]
    if old["system_identifier"] != new["system_identifier"] and not force:
        raise ClusterError(f"cannot repoint set {name!r}: {redacted(new_dsn)} has system identifier "
                           f"{new['system_identifier']}, the current database {old['system_identifier']}: "
                           "not a physical copy (use --force if it really holds the same queue)")
    return done + [f"same system identifier {new['system_identifier']} as the old database"]


def repoint_set(store: ClusterStore, name: str, new_dsn: str, force: bool = False) -> list[str]:
    """Store new_dsn as set name's database in its next version; returns lines for the operator.

    Raises ClusterError (checks failed, no such set) or ConflictError (the set
    changed meanwhile); nothing is written then.
    """
    record, znode_version = store.get_set(name)
    old_dsn = record.dsn
    if old_dsn == new_dsn:
        return [f"set {name!r} already uses {redacted(new_dsn)}: nothing changed"]
    lines = check_target(name, record, new_dsn, force)
    new_record = record.next(config=replace(record.config, dsn=new_dsn),
                             change={"kind": "repoint", "from": redacted(old_dsn), "to": redacted(new_dsn)})
    store.update_set(new_record, znode_version)
    return lines + [f"set {name!r}: version {record.version} -> {new_record.version}, database "
                    f"{redacted(old_dsn)} -> {redacted(new_dsn)}; running relays restart on it"]

