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
"""

from psycopg2.extensions import make_dsn

from pgshovel2.cluster import ClusterStore
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
