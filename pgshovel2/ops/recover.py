"""``pgshovel cluster recover``: finish or undo admin commands that died half-way.

A command killed after PREPARE TRANSACTION leaves a prepared transaction (it
holds its tables' locks until resolved) and an intent znode. ZooKeeper says
whether the command's ZooKeeper step happened, so each prepared transaction is
committed exactly when ZooKeeper already shows its change:

- create: the set exists and was created by this gid;
- upgrade to version N: history/N exists and was written by this gid;
- drop: the set no longer exists.

Otherwise it is rolled back. Intents without a prepared transaction (the
command died before PREPARE: its transaction was rolled back by PostgreSQL)
are removed. Run it when no admin command is running.

Commands on servers without prepared transactions (pgshovel2.ops.twophase) leave an intent
with the transaction's txid and the ZooKeeper step: when ``txid_status`` says it committed
and ZooKeeper does not show the change yet, recover applies the recorded step (roll
forward); when it aborted (or the command died before recording its txid), the intent is
removed; a txid still in progress is left alone (the command is running).
"""

from psycopg2.extensions import make_dsn

from pgshovel2.cluster import ClusterStore
from pgshovel2.db import connect
from pgshovel2.errors import ClusterError
from pgshovel2.ops import cluster_admin, twophase
from pgshovel2.ops.twophase import Intent


def decide(store: ClusterStore, intent: Intent) -> tuple[bool, str]:
    """(commit?, why) for a prepared transaction of intent, from the ZooKeeper state."""
    if intent.action == "drop":
        if store.exists(intent.set_name):
            return False, "the set is still in ZooKeeper"
        return True, "the set is gone from ZooKeeper"
    try:  # create writes history/1 as upgrade writes history/N, in the same multi-op as the set record
        record = store.get_version(intent.set_name, intent.version)
    except ClusterError:
        return False, f"ZooKeeper has no version {intent.version} of the set"
    if (record.change or {}).get("gid") != intent.gid:
        return False, f"version {intent.version} in ZooKeeper was written by another command"
    return True, f"ZooKeeper has version {intent.version}, written by this command"


def recover(store: ClusterStore, extra_dsns: tuple[str, ...] = ()) -> list[str]:
    """Resolve every prepared pgshovel2 transaction of the cluster; returns what was done.

    Looks in the databases of the cluster's sets, of pending intents and
    extra_dsns (prepared transactions of any database on those servers).
    Raises ClusterError/CaptureError when ZooKeeper or a database cannot be reached.
    """
    store.require_initialized()
    done, prepared = [], set()
    intents = store.intents()
    for gid, data in store.intent_records().items():
        if "lock" in data and (intent := Intent.parse(gid)) is not None:
            done.append(_recover_committed_first(store, intent, data))
            prepared.add(gid)
    dsns = set(intents.values()) | set(cluster_admin.set_databases(store)) | set(extra_dsns)
    for dsn in sorted(dsns):
        for gid, database in twophase.prepared_gids(dsn, "cluster recover"):
            intent = Intent.parse(gid)
            if intent is None or intent.cluster != store.cluster or gid in prepared:
                continue
            prepared.add(gid)
            commit, why = decide(store, intent)
            twophase.resolve(make_dsn(dsn, dbname=database), gid, commit, "cluster recover")
            store.clear_intent(intent.gid)
            verb = "committed" if commit else "rolled back"
            done.append(f"{verb} {intent.action} of set {intent.set_name!r} (prepared transaction {gid} "
                        f"in database {database}): {why}")
    for gid in intents:
        if gid not in prepared and (intent := Intent.parse(gid)) is not None:
            store.clear_intent(intent.gid)
            done.append(f"removed the intent of {intent.action} of set {intent.set_name!r} ({gid}): "
                        "no prepared transaction is left for it (it died before PREPARE, so PostgreSQL rolled "
                        "it back, or it finished without removing its intent): nothing to resolve")
    return done


def txid_status(dsn: str, txid: int) -> str | None:
    """``committed``, ``aborted``, ``in progress``, or None when the server no longer knows."""
    conn = connect(dsn, "cluster recover")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT txid_status(%s)", (txid,))
            return cur.fetchone()[0]
    finally:
        conn.close()


def _recover_committed_first(store: ClusterStore, intent: Intent, data: dict) -> str:
    """Resolve an intent of a command run without prepared transactions; returns what was done."""
    what = f"{intent.action} of set {intent.set_name!r} ({intent.gid})"
    status = txid_status(data["dsn"], data["txid"]) if "txid" in data else "aborted"
    if status == "in progress":
        return f"left {what}: its transaction {data['txid']} is still running"
    if status is None:
        raise ClusterError(f"{what}: the database no longer knows whether transaction {data['txid']} committed; "
                           "compare the set's capture in the database with ZooKeeper and remove the intent by hand")
    if status == "aborted":
        store.clear_intent(intent.gid)
        return f"removed the intent of {what}: its database transaction did not commit, nothing changed"
    applied, why = decide(store, intent)
    if not applied:
        twophase.apply_step(store, data["zk_step"])
        why = f"applied its ZooKeeper step ({why} before)"
    store.clear_intent(intent.gid)
    return f"completed {what}: its database transaction committed; {why}"
