"""Cluster-wide commands: ``pgshovel cluster inspect`` and ``pgshovel cluster upgrade``.

``upgrade`` moves the capture SQL installed in every set's database (the
``pgshovel2`` extension) to the version this package ships, one database at a
time, each ``ALTER EXTENSION ... UPDATE`` in its own short transaction:
triggers keep firing throughout (backends that loaded the old shared library
keep it until they end; the trigger's arguments and events do not change
between versions), so capture never stops. A database whose PgQ is the PL-only build
(pgshovel2.backends.pgq_install) gets PgQ's ``pgq_pl_only.upgrade.sql`` from this host when
that file's version is newer than ``pgq.version()`` there (one transaction; PgQ's functions
are replaced in place, its tables kept). Then each set gets what this version captures with
(:func:`_partitions_update`, one transaction a set): pgshovel2_pl at this package's version where
the set runs its functions (PL/pgSQL capture; a logical set with a partitioned table), and the
TRUNCATE triggers of its partitioned tables and their partitions that it lacks (a set created
before they existed). Every database is checked before any is changed; a downgrade is refused
unless forced.
"""

from typing import Any

import psycopg2
from psycopg2.extensions import make_dsn, parse_dsn

from pgshovel2 import __version__
from pgshovel2.backends import lifecycle, partitions, pgq_install, plcapture
from pgshovel2.backends.trigger import EXTENSION_VERSION
from pgshovel2.cluster import ClusterStore
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ClusterError
from pgshovel2.ops import cluster_secure
from pgshovel2.relay import election
from pgshovel2.setrecord import SetRecord

EXTENSION = "pgshovel2"


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.2.1"`` -> (0, 2, 1); raises ClusterError for anything else."""
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError as exc:
        raise ClusterError(f"not a version number: {text!r}") from exc


def set_databases(store: ClusterStore) -> dict[str, list[str]]:
    """Database DSN -> names of the sets captured in it."""
    out: dict[str, list[str]] = {}
    for record in store.records():
        out.setdefault(record.dsn, []).append(record.name)
    return out


def inspect(store: ClusterStore) -> dict[str, Any]:
    """Cluster version, sets (version, backend, tables, relays) and pending admin intents."""
    root, _ = store.get_root()
    sets = [{"name": r.name, "version": r.version, "backend": r.backend,
             "tables": [f"{t.schema}.{t.name}" for t in r.tables], "relays": election.status(store, r.name)}
            for r in store.records()]
    return {"cluster": store.cluster, "zookeeper": store.hosts, **root, "sets": sets,
            "pending_intents": sorted(store.intents()), "acl": cluster_secure.acl_report(store)}


def _extension_versions(dsn: str) -> tuple[str | None, str]:
    """(installed version or None, this package's version EXTENSION_VERSION) in dsn's database.

    Raises ClusterError when the server lacks that version's files.
    """
    conn = connect(dsn, "cluster upgrade")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT installed FROM pg_available_extension_versions WHERE name = %s "
                        "AND version = %s", (EXTENSION, EXTENSION_VERSION))
            available = cur.fetchone()
            cur.execute("SELECT extversion FROM pg_extension WHERE extname = %s", (EXTENSION,))
            installed = cur.fetchone()
    finally:
        conn.close()
    if available is None and installed is not None:
        where = parse_dsn(dsn).get("dbname", "?")
        raise ClusterError(f"version {EXTENSION_VERSION} of the {EXTENSION} extension is not installed on the "
                           f"server of database {where}: build and install sql/capture there first (make install)")
    return (installed[0] if installed else None), EXTENSION_VERSION


def upgrade(store: ClusterStore, force: bool = False) -> list[str]:
    """Update the extension in every set's database, then record this package's version
    in the cluster znode; returns what was done.

    Raises ClusterError for a downgrade (cluster or a database newer than this
    package) unless force; nothing is changed then.
    """
    root, root_version = store.get_root()
    recorded = root.get("pgshovel_version", "0")
    if version_tuple(recorded) > version_tuple(__version__) and not force:
        raise ClusterError(f"cluster {store.cluster!r} is at pgshovel2 {recorded}, this package is "
                           f"{__version__}: refusing to downgrade (--force to do it anyway)")
    plan = []
    for dsn, sets in sorted(set_databases(store).items()):
        installed, target = _extension_versions(dsn)
        if installed and version_tuple(installed) > version_tuple(target) and not force:
            raise ClusterError(f"database of set(s) {', '.join(sets)} has {EXTENSION} {installed}, newer "
                               f"than this package's {target}: refusing to downgrade (--force)")
        plan.append((dsn, sets, installed, target))
    pgq_plan = [(dsn, sets, *_pl_pgq_plan(dsn, sets)) for dsn, sets, _, _ in plan]
    done = [_update(dsn, sets, installed, target) for dsn, sets, installed, target in plan]
    done += [_pgq_update(dsn, sets, have, source) for dsn, sets, have, source in pgq_plan if have]
    done += [line for record in store.records() for line in _partitions_update(record)]
    done += cluster_secure.secure(store)
    root, root_version = store.get_root()
    store.put_root({**root, "pgshovel_version": __version__}, root_version)
    done.append(f"cluster {store.cluster!r}: pgshovel2 {recorded} -> {__version__}")
    return done


def _update(dsn: str, sets: list[str], installed: str | None, target: str) -> str:
    label = f"database {parse_dsn(dsn).get('dbname', '?')} (set(s) {', '.join(sets)})"
    if installed == target:
        return f"{label}: {EXTENSION} {target} already"
    if installed is None:  # logical sets only: their database needs no capture extension
        return f"{label}: {EXTENSION} not installed (no trigger set there), nothing to update"
    conn = connect(make_dsn(dsn), "cluster upgrade")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"ALTER EXTENSION {EXTENSION} UPDATE TO %s", (target,))
    except psycopg2.Error as exc:
        raise ClusterError(f"{label}: updating {EXTENSION} {installed} -> {target} failed: "
                           f"{str(exc).strip()}") from exc
    finally:
        conn.close()
    return f"{label}: {EXTENSION} {installed} -> {target}"


def _pl_pgq_plan(dsn: str, sets: list[str]) -> tuple[str | None, pgq_install.PlSource | None]:
    """(PgQ version there, this host's PL-only build) when dsn's database has a PL-only PgQ,
    (None, None) otherwise. Raises ClusterError when this host has no PL-only build to compare."""
    conn = connect(dsn, "cluster upgrade")
    try:
        with conn.cursor() as cur:
            have = pgq_install.installed(cur)
    finally:
        conn.close()
    if have is None or have[0] != "pl":
        return None, None
    try:
        return have[1], pgq_install.locate()
    except CaptureError as exc:
        raise ClusterError(f"database of set(s) {', '.join(sets)} has PgQ {have[1]} installed from its "
                           f"PL-only build: {exc}") from exc


def _pgq_update(dsn: str, sets: list[str], have: str, source: pgq_install.PlSource) -> str:
    label = f"database {parse_dsn(dsn).get('dbname', '?')} (set(s) {', '.join(sets)})"
    if have != "unknown" and version_tuple(have) >= version_tuple(source.version):
        return f"{label}: PgQ (PL-only) {have}, {source.install} is {source.version}: nothing to upgrade"
    conn = connect(make_dsn(dsn), "cluster upgrade")
    try:
        with conn.cursor() as cur:
            pgq_install.install_pl(cur, source, upgrade=True)
        conn.commit()
    except CaptureError as exc:
        raise ClusterError(f"{label}: upgrading PgQ {have} -> {source.version}: {exc}") from exc
    finally:
        conn.close()
    return f"{label}: PgQ (PL-only) {have} -> {source.version} from {source.upgrade or source.install}"


def _partitions_update(record: SetRecord) -> list[str]:
    """What set record's database lacks of this version's capture, added in one transaction:
    pgshovel2_pl at plcapture.VERSION where the set runs its functions, and the TRUNCATE
    triggers of its partitioned tables and their partitions (pgshovel2.backends.partitions).
    Raises ClusterError naming the set when the database refuses."""
    label = f"set {record.name!r}"
    done = []
    conn = connect(make_dsn(record.dsn), "cluster upgrade")
    try:
        with conn.cursor() as cur:
            tables = partitions.partitioned(cur, record.tables)
            if lifecycle.uses_plcapture(record, bool(tables)):
                before = plcapture.installed_version(cur)
                plcapture.ensure(cur)
                if before != plcapture.VERSION:
                    done.append(f"{label}: {plcapture.SCHEMA} {before} -> {plcapture.VERSION}")
            triggers = partitions.for_record(record)
            for table in tables:
                for suffix in partitions.missing_root(cur, triggers, table):
                    cur.execute(partitions.root_statement(triggers, table, suffix))
                    done.append(f"{label}: trigger {triggers.base + suffix} on {table.qualified}")
                done += [f"{label}: trigger {triggers.leaf_name} on {leaf}"
                         for leaf in partitions.add_missing(cur, triggers, table)]
        conn.commit()
    except (psycopg2.Error, CaptureError) as exc:
        raise ClusterError(f"{label}: adding its partitions' TRUNCATE triggers failed: {str(exc).strip()}") from exc
    finally:
        conn.close()
    return done
