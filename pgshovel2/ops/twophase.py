"""Two-phase commit of an admin command across PostgreSQL and ZooKeeper.

An admin command (set create, upgrade, drop) does its database work in one
transaction named by a global transaction id (gid), PREPAREs it, applies its
ZooKeeper change as one multi-op, then COMMITs PREPARED. A crash between the
steps leaves a prepared transaction whose gid says what it was for, and
``pgshovel cluster recover`` decides from ZooKeeper whether it commits or
rolls back (:mod:`pgshovel2.recover`). Before the database work starts, an
*intent* znode records the database DSN, so recover knows where to look even
when the set is not (or no longer) in ZooKeeper; it is removed at the end.

gid form: ``pgshovel2:<cluster>:<set>:<action>:<version>:<token>``.

Without prepared transactions (``max_prepared_transactions = 0``, as on most managed
services) the order is: intent (with the set's admin lock, ``locks/<set>``) -> database
work -> the ZooKeeper step to apply and the transaction's txid are added to the intent ->
COMMIT -> ZooKeeper multi-op -> intent removed. The database commits first, so a crash
after COMMIT leaves the ZooKeeper step to do: ``cluster recover`` asks the database for the
txid's fate (``txid_status``) and rolls forward (applies the recorded step) when it
committed, or drops the intent when it did not. Same outcome once recover has run; between
the crash and recover the database is ahead of ZooKeeper (not behind), and while the set
lock is held no other command can change the set. (The failpoints keep their names:
``admin_before_prepare`` before COMMIT, ``admin_prepared`` after it.)
"""

import functools
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import psycopg2
import psycopg2.errors
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from pgshovel2 import failpoints
from pgshovel2.cluster import ClusterStore
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ClusterError, ConflictError
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)

ACTIONS = ("create", "upgrade", "drop")
LOCK_TIMEOUT = "10s"
DEADLOCK_ATTEMPTS = 3

P = ParamSpec("P")
R = TypeVar("R")


class DeadlockError(ConflictError):
    """PostgreSQL chose the command's transaction as a deadlock's victim; nothing was changed."""


@dataclass(frozen=True)
class Intent:
    """What a gid stands for. version: the set version the command writes (drop: the one it removes)."""

    cluster: str
    set_name: str
    action: str
    version: int
    token: str

    @property
    def gid(self) -> str:
        """The PostgreSQL global transaction id of the command."""
        return f"pgshovel2:{self.cluster}:{self.set_name}:{self.action}:{self.version}:{self.token}"

    @classmethod
    def new(cls, cluster: str, set_name: str, action: str, version: int) -> "Intent":
        """A fresh intent with a random token (tells two attempts at the same version apart)."""
        return cls(cluster, set_name, action, version, secrets.token_hex(4))

    @classmethod
    def parse(cls, gid: str) -> "Intent | None":
        """The intent of a pgshovel2 gid; None for anybody else's prepared transaction."""
        parts = gid.split(":")
        if len(parts) < 6 or parts[0] != "pgshovel2" or parts[-3] not in ACTIONS:
            return None
        try:
            version = int(parts[-2])
        except ValueError:
            return None
        return cls(":".join(parts[1:-4]), parts[-4], parts[-3], version, parts[-1])


@contextmanager
def prepared_command(store: ClusterStore, intent: Intent, dsn: str, what: str) -> Iterator:
    """Open the command's database transaction; yields a cursor for its work.

    On leaving the block normally the transaction is PREPAREd (failpoints
    ``admin_before_prepare``, ``admin_prepared``) and left prepared: call
    :func:`finish` with the ZooKeeper step. An error inside the block rolls
    back and removes the intent. Raises CaptureError when the database
    refuses, ConflictError when a lock is not granted within LOCK_TIMEOUT,
    DeadlockError when PostgreSQL rolled the transaction back to break a deadlock.
    """
    conn = connect(dsn, f"set {intent.set_name!r}")
    try:
        two_phase = supports_prepare(conn)
        store.record_intent(intent.gid, dsn, None if two_phase else intent.set_name)
    except BaseException:
        conn.close()
        raise
    try:
        if two_phase:
            conn.tpc_begin(intent.gid)
        with conn.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            yield conn, cur
            if not two_phase:
                cur.execute("SELECT txid_current()")
                store.update_intent(intent.gid, txid=cur.fetchone()[0])
        failpoints.hit("admin_before_prepare")
        conn.tpc_prepare() if two_phase else conn.commit()
        failpoints.hit("admin_prepared")
    except psycopg2.errors.LockNotAvailable as exc:
        _abandon(store, conn, intent)
        raise ConflictError(f"{what}: another command holds the set's tables (no lock within "
                            f"{LOCK_TIMEOUT}); nothing was changed: retry") from exc
    except psycopg2.errors.DeadlockDetected as exc:
        _abandon(store, conn, intent)
        raise DeadlockError(f"{what}: deadlocked with another session and was rolled back; nothing was "
                            f"changed: retry ({str(exc).strip().splitlines()[0]})") from exc
    except psycopg2.Error as exc:
        _abandon(store, conn, intent)
        raise CaptureError(f"{what}: the database refused: {str(exc).strip()}") from exc
    except BaseException:
        _abandon(store, conn, intent)
        raise
    conn.close()


def retry_on_deadlock(command: Callable[P, R]) -> Callable[P, R]:
    """Run an admin command again, whole, when PostgreSQL rolled it back as a deadlock's victim.

    A deadlock is a matter of timing, not of the command: pgqd's ``pgq.ticker()`` locks a
    queue's event sequence then its tick sequence, ``pgq.drop_queue`` drops them the other
    way round, and a writer of captured tables can lock them in any order. The victim's
    transaction changed nothing (its intent is removed), so the command starts over, reading
    ZooKeeper again; after DEADLOCK_ATTEMPTS tries the DeadlockError is raised.
    """
    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, DEADLOCK_ATTEMPTS):
            try:
                return command(*args, **kwargs)
            except DeadlockError as exc:
                log.warning("%s; trying again (%d of %d)", exc, attempt + 1, DEADLOCK_ATTEMPTS)
                time.sleep(0.2 * attempt)
        return command(*args, **kwargs)  # the last try: its DeadlockError is raised
    return run


def supports_prepare(conn) -> bool:
    """Whether the server of conn can PREPARE TRANSACTION (max_prepared_transactions > 0)."""
    with conn.cursor() as cur:
        cur.execute("SHOW max_prepared_transactions")
        enabled = int(cur.fetchone()[0]) > 0
    conn.rollback()
    return enabled


def plan(store: ClusterStore, intent: Intent, step: dict) -> None:
    """Record in the intent the ZooKeeper step the command will apply (call it inside
    :func:`prepared_command`'s block, before the commit): what ``cluster recover`` applies
    when the database committed without it. step: ``{"op": "create", "record": {...}}``,
    ``{"op": "update", "record": {...}, "znode_version": n}`` or
    ``{"op": "delete", "name", "version", "prefix"}`` (ClusterStore's methods' arguments)."""
    store.update_intent(intent.gid, zk_step=step)


def apply_step(store: ClusterStore, step: dict) -> None:
    """Apply a step recorded by :func:`plan`. Raises ClusterError when ZooKeeper refuses."""
    if step["op"] == "create":
        store.create_set(SetRecord.from_dict(step["record"]))
    elif step["op"] == "update":
        store.update_set(SetRecord.from_dict(step["record"]), step["znode_version"])
    else:
        store.delete_set(step["name"], step["version"], step["prefix"])


def _abandon(store: ClusterStore, conn, intent: Intent) -> None:
    try:
        conn.tpc_rollback()
    except psycopg2.Error:  # not a two-phase transaction: closing rolls it back
        pass
    conn.close()
    store.clear_intent(intent.gid)


def finish(store: ClusterStore, intent: Intent, dsn: str, zk_step: Callable[[], None], what: str) -> None:
    """Run the ZooKeeper step, then COMMIT PREPARED (failpoint ``admin_zk_done`` between).

    If ZooKeeper refuses the step, the prepared transaction is rolled back and
    the error re-raised: neither side changed. If the connection to ZooKeeper
    was lost during the step, its outcome is unknown: the transaction stays
    prepared with its intent and ClusterError asks for ``cluster recover``,
    which decides from what ZooKeeper then shows. Raises ClusterError when the
    database cannot be reached for the final commit (recover commits it later).
    """
    committed = "txid" in store.intent_records().get(intent.gid, {})
    try:
        zk_step()
    except (ConnectionLoss, SessionExpiredError, KazooTimeoutError) as exc:
        kept = "its committed database change is kept" if committed else f"prepared transaction {intent.gid} is kept"
        raise ClusterError(f"{what}: ZooKeeper went away during the change ({exc!r}); whether it was "
                           f"applied is unknown: run 'pgshovel cluster recover' ({kept})") from exc
    except BaseException as exc:
        if committed:
            raise ClusterError(f"{what}: the database change is committed (no prepared transactions on this "
                               f"server) but ZooKeeper refused its step: {exc}; run 'pgshovel cluster recover' "
                               f"to apply the recorded step (intent {intent.gid})") from exc
        resolve(dsn, intent.gid, commit=False, what=what)
        store.clear_intent(intent.gid)
        raise
    failpoints.hit("admin_zk_done")
    if not committed:
        resolve(dsn, intent.gid, commit=True, what=what)
    store.clear_intent(intent.gid)


def resolve(dsn: str, gid: str, commit: bool, what: str) -> None:
    """COMMIT PREPARED or ROLLBACK PREPARED gid in the database of dsn."""
    conn = connect(dsn, what)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            verb = "COMMIT" if commit else "ROLLBACK"
            cur.execute(f"{verb} PREPARED %s", (gid,))
    except psycopg2.Error as exc:
        raise ClusterError(f"{what}: {'COMMIT' if commit else 'ROLLBACK'} PREPARED {gid!r} failed: "
                           f"{str(exc).strip()}; run 'pgshovel cluster recover'") from exc
    finally:
        conn.close()


def prepared_gids(dsn: str, what: str) -> list[tuple[str, str]]:
    """(gid, database) of every pgshovel2 prepared transaction in the server of dsn."""
    conn = connect(dsn, what)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT gid, database FROM pg_prepared_xacts WHERE gid LIKE 'pgshovel2:%%' "
                        "ORDER BY prepared")
            return cur.fetchall()
    finally:
        conn.close()
