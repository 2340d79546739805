"""ZooKeeper store of a cluster's replication sets (kazoo): every znode path is built here.

Layout::

    /pgshovel2/<cluster>                          {"pgshovel_version": ..., "created_at": ...}
    /pgshovel2/<cluster>/sets/<set>               set record (pgshovel2.setrecord), current version
    /pgshovel2/<cluster>/sets/<set>/history/<n>   set record of version n (10 digits)
    /pgshovel2/<cluster>/sets/<set>/relay/<key>   the relay's records: snapshot, last_error, leader
    /pgshovel2/<cluster>/sets/<set>/relay/election  the relays' election (kazoo Lock)
    /pgshovel2/<cluster>/sets/<set>/snapshot_request  the online snapshot request (versioned JSON)
    /pgshovel2/<cluster>/intents/<gid>            running admin commands ({"dsn", "lock"?, "txid"?, "zk_step"?})
    /pgshovel2/<cluster>/locks/<set>              gid of the command holding the set (no-PREPARE mode)
    /pgshovel2/<cluster>/prefixes/<prefix>        the set whose topics use this prefix (escaped)

Cluster and set names are validated (pgshovel2.config) before any path is built from them,
so no name can reach another set's znodes. No change data passes through ZooKeeper.

Security (pgshovel2.zkauth): the client authenticates as its ZooKeeperAuth says (SASL or digest,
over TLS or not) and every znode it creates -- through kazoo's default ACL: create, ensure_path,
multi-ops and the election's lock nodes alike -- gets that ACL. A client ZooKeeper refuses is
stopped on entry with an error naming the hosts and the mechanism, before anything is written.
"""

import json
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

from pgshovel2 import __version__, names, zksession
from pgshovel2.config import validate_cluster_name, validate_set_name
from pgshovel2.errors import ClusterError, ConflictError, UnavailableError
from pgshovel2.setrecord import SetRecord
from pgshovel2.zkauth import ZooKeeperAuth
from pgshovel2.zkintents import IntentStore, dump

ROOT = "/pgshovel2"


class ClusterStore(IntentStore):
    """A cluster's znodes. Use as a context manager (connects and closes).

    hosts: ZooKeeper connect string, e.g. ``127.0.0.1:2181``; cluster: name (ConfigError
    when invalid); auth: how to authenticate and the ACL of new znodes (default: none, open
    ACL); its passwords are read here (ConfigError when a reference does not resolve). Entering
    raises ClusterError when ZooKeeper cannot be reached within timeout (s), refuses the login,
    or refuses this principal the cluster's znode.
    """

    def __init__(self, hosts: str, cluster: str, timeout: float = 10.0, auth: ZooKeeperAuth | None = None):
        self.hosts, self.cluster, self.timeout = hosts, validate_cluster_name(cluster, "--cluster"), timeout
        self.auth = auth or ZooKeeperAuth()
        self.zk = KazooClient(hosts=hosts, timeout=timeout, **self.auth.client_options())
        self.path = f"{ROOT}/{cluster}"

    def __enter__(self) -> "ClusterStore":
        zksession.start(self.zk, self.hosts, self.auth, max(self.timeout, 10.0))
        try:
            zksession.check_access(self.zk, self.hosts, self.auth, [self.path, ROOT])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.zk.stop()
        self.zk.close()

    # -- paths -------------------------------------------------------------------------------

    def set_path(self, name: str) -> str:
        """Znode of a set. Raises ConfigError for an invalid set name (before any path exists)."""
        return f"{self.path}/sets/{validate_set_name(name, 'set name')}"

    def relay_path(self, name: str, key: str) -> str:
        """Znode of a record of the set's relay (``snapshot``, ``last_error``, ``leader``, ``election``)."""
        return f"{self.set_path(name)}/relay/{key}"

    def _history_path(self, name: str, version: int) -> str:
        return f"{self.set_path(name)}/history/{version:010d}"

    @property
    def intents_path(self) -> str:
        """Znode under which running admin commands record their intent."""
        return f"{self.path}/intents"

    # -- the cluster --------------------------------------------------------------------------

    def initialize(self) -> bool:
        """Create the cluster's znodes; False when they already exist."""
        if self.zk.exists(self.path):
            return False
        self.zk.ensure_path(ROOT)
        tx = self.zk.transaction()
        tx.create(self.path, dump({"pgshovel_version": __version__, "created_at": time.time()}))
        tx.create(f"{self.path}/sets", b"")
        _check(tx.commit(), f"initialize cluster {self.cluster!r}")
        return True

    def get_root(self) -> tuple[dict[str, Any], int]:
        """(cluster record, znode version): ``pgshovel_version``, ``created_at``, ...

        Raises ClusterError when the cluster is not initialized.
        """
        self.require_initialized()
        data, stat = self.zk.get(self.path)
        return json.loads(data), stat.version

    def put_root(self, record: dict[str, Any], version: int) -> None:
        """Replace the cluster record if its znode is still at version; else ConflictError."""
        try:
            self.zk.set(self.path, dump(record), version=version)
        except BadVersionError as exc:
            raise ConflictError(f"cluster {self.cluster!r} was changed by another command; retry") from exc

    def require_initialized(self) -> None:
        """Raise ClusterError unless ``pgshovel cluster initialize`` ran."""
        if not self.zk.exists(f"{self.path}/sets"):
            raise ClusterError(f"cluster {self.cluster!r} is not initialized in ZooKeeper at "
                               f"{self.hosts}: run 'pgshovel cluster initialize'")

    # -- sets ---------------------------------------------------------------------------------

    def list_sets(self) -> list[str]:
        """Names of the cluster's sets, sorted."""
        self.require_initialized()
        return sorted(self.zk.get_children(f"{self.path}/sets"))

    def get_set(self, name: str) -> tuple[SetRecord, int]:
        """(set record, znode version). Raises ClusterError if there is no such set."""
        path = self.set_path(name)
        self.require_initialized()
        try:
            data, stat = self.zk.get(path)
        except NoNodeError as exc:
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}") from exc
        return SetRecord.from_node(data), stat.version

    def records(self) -> list[SetRecord]:
        """The current record of every set of the cluster (sets dropped meanwhile left out)."""
        out = []
        for name in self.list_sets():
            try:
                out.append(self.get_set(name)[0])
            except ClusterError:
                continue
        return out

    def exists(self, name: str) -> bool:
        """True if the set exists."""
        return self.zk.exists(self.set_path(name)) is not None

    def create_set(self, record: SetRecord) -> None:
        """Create a set's znodes atomically (set, history/1, relay) and claim its topic prefix.

        The claim (``prefixes/<escaped prefix>``, created in the same multi-op) makes a
        second set with the same effective topic prefix fail, even when both are created at
        once; sets created before claims existed are checked by their records. Raises
        ClusterError (set exists, prefix taken, ZooKeeper refuses).
        """
        self.require_initialized()
        self.check_prefix(record)
        path = self.set_path(record.name)
        claim = self._prefix_path(record.prefix)
        tx = self.zk.transaction()
        tx.create(path, record.to_node())
        tx.create(f"{path}/history", b"")
        tx.create(self._history_path(record.name, record.version), record.to_node())
        tx.create(f"{path}/relay", b"")
        self.zk.ensure_path(f"{self.path}/prefixes")
        tx.create(claim, record.name.encode())
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise ClusterError(f"replication set {record.name!r} already exists in cluster {self.cluster!r}")
        if isinstance(results[-1], NodeExistsError):
            raise ClusterError(self._prefix_taken(record, self._claimant(claim)))
        _check(results, f"create set {record.name!r}")

    def _prefix_path(self, prefix: str) -> str:
        return f"{self.path}/prefixes/{names.topic_part(prefix)}"

    def _claimant(self, claim: str) -> str:
        try:
            return self.zk.get(claim)[0].decode()
        except NoNodeError:
            return "(a set dropped meanwhile)"

    def _prefix_taken(self, record: SetRecord, other: str) -> str:
        return (f"set {record.name!r} would write the topics of set {other!r}: both use topic prefix "
                f"{record.prefix!r} ({record.topics.transactions}, {record.topics.positions}, ...); "
                "give one of them another topic_prefix")

    def check_prefix(self, record: SetRecord) -> None:
        """Raise ClusterError when another set of the cluster has record's effective topic prefix."""
        for other in self.records():
            if other.name != record.name and names.topic_part(other.prefix) == names.topic_part(record.prefix):
                raise ClusterError(self._prefix_taken(record, other.name))

    def update_set(self, record: SetRecord, znode_version: int) -> int:
        """Store record as its set's next version, atomically, if the set's znode is still at
        znode_version (from :meth:`get_set`); returns the new znode version.

        record.version must be the stored version + 1; history/<version> is created in the
        same ZooKeeper multi-op. Raises ConflictError when another admin changed the set
        first (nothing is written), ClusterError when ZooKeeper refuses.
        """
        name = record.name
        path = self.set_path(name)
        tx = self.zk.transaction()
        tx.set_data(path, record.to_node(), version=znode_version)
        tx.create(self._history_path(name, record.version), record.to_node())
        results = tx.commit()
        if any(isinstance(r, (BadVersionError, NodeExistsError)) for r in results):
            raise ConflictError(f"set {name!r} was changed by someone else since version "
                                f"{record.version - 1} was read; nothing was written: inspect it and retry")
        if isinstance(results[0], NoNodeError):
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}")
        _check(results, f"upgrade set {name!r}")
        return znode_version + 1

    def get_version(self, name: str, version: int) -> SetRecord:
        """The set record of one version (history). Raises ClusterError if there is none."""
        try:
            data, _ = self.zk.get(self._history_path(name, version))
        except NoNodeError as exc:
            raise ClusterError(f"set {name!r} has no version {version}") from exc
        return SetRecord.from_node(data)

    def version_written(self, name: str, version: int) -> tuple[SetRecord, float]:
        """The set record of one version and when its ``history/<n>`` znode was created (ZooKeeper's
        ctime, seconds since the epoch): the version's own time where its record has none (records
        before upgraded_at was set on every version). Raises ClusterError if there is none."""
        try:
            data, stat = self.zk.get(self._history_path(name, version))
        except NoNodeError as exc:
            raise ClusterError(f"set {name!r} has no version {version}") from exc
        return SetRecord.from_node(data), stat.ctime / 1000

    def history(self, name: str) -> list[int]:
        """Versions of the set kept in its history, ascending."""
        try:
            return sorted(int(v) for v in self.zk.get_children(f"{self.set_path(name)}/history"))
        except NoNodeError as exc:
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}") from exc

    def delete_set(self, name: str, version: int, prefix: str | None = None) -> None:
        """Delete a set's znode and everything under it in one multi-op, if its znode
        version is still ``version``, with its claim on topic prefix (the record's); a set
        already gone is not an error.

        Raises ConflictError when the set changed since it was read.
        """
        path = self.set_path(name)
        for _ in range(10):  # children may come and go (relays' election nodes): retry
            try:
                nodes = self._descendants(path)
            except NoNodeError:
                return
            tx = self.zk.transaction()
            tx.check(path, version)
            for node in nodes:
                tx.delete(node)
            tx.delete(path)
            claim = self._prefix_path(prefix) if prefix is not None else None
            if claim is not None and self._claimant(claim) == name:
                tx.delete(claim)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return
            if isinstance(results[0], BadVersionError):
                raise ConflictError(f"set {name!r} changed while it was being dropped; nothing was "
                                    "removed: inspect it and retry")
            if isinstance(results[0], NoNodeError):
                return
        raise ClusterError(f"ZooKeeper kept refusing to delete set {name!r}: {results!r}")

    def _descendants(self, path: str) -> list[str]:
        """Every znode under path, children before their parents."""
        out = []
        for child in self.zk.get_children(path):
            sub = f"{path}/{child}"
            out.extend(self._descendants(sub))
            out.append(sub)
        return out

    def watch_set(self, name: str, callback: Callable[[bytes | None, Any], bool | None]) -> None:
        """Call callback(data or None when deleted, stat) now and at every change of the set's
        znode, until it returns False (kazoo DataWatch)."""
        self.zk.DataWatch(self.set_path(name), callback)

    def get_snapshot_request(self, name: str, timeout: float | None = None) -> tuple[dict[str, Any] | None, int]:
        """(the set's online snapshot request, its znode version); (None, -1) when there is none.

        timeout: seconds to wait for ZooKeeper (None: as long as the session lasts). Raises
        UnavailableError when the connection drops, the session ends or timeout passes first.
        """
        try:
            data, stat = self.zk.get_async(f"{self.set_path(name)}/snapshot_request").get(timeout=timeout)
        except NoNodeError:
            return None, -1
        except (ConnectionLoss, SessionExpiredError, KazooTimeoutError) as exc:
            raise UnavailableError(f"cannot read the online snapshot request of set {name!r} in ZooKeeper: "
                                   f"{type(exc).__name__}") from exc
        return json.loads(data), stat.version

    def put_snapshot_request(self, name: str, request: dict[str, Any], version: int) -> None:
        """Write the set's online snapshot request if its znode is still at version (-1: absent).
        Raises ConflictError when it changed meanwhile, ClusterError when the set is gone."""
        path = f"{self.set_path(name)}/snapshot_request"
        try:
            if version < 0:
                self.zk.create(path, dump(request))
            else:
                self.zk.set(path, dump(request), version=version)
        except (BadVersionError, NodeExistsError) as exc:
            raise ConflictError(f"the snapshot request of set {name!r} changed meanwhile; run it again") from exc
        except NoNodeError as exc:
            raise ClusterError(f"set {name!r} does not exist (or was dropped)") from exc

    # -- the relay's records and election ------------------------------------------------------

    def get_relay_record(self, name: str, key: str) -> dict[str, Any] | None:
        """A record of the set's relay (e.g. ``snapshot``), None if absent."""
        try:
            data, _ = self.zk.get(self.relay_path(name, key))
        except NoNodeError:
            return None
        return json.loads(data)

    def put_relay_record(self, name: str, key: str, record: dict[str, Any], ephemeral: bool = False) -> None:
        """Create or replace a record of the set's relay (ephemeral: ends with this session).

        Raises ClusterError when the set was dropped.
        """
        path = self.relay_path(name, key)
        try:
            self.zk.create(path, dump(record), ephemeral=ephemeral)
        except NodeExistsError:
            self.zk.set(path, dump(record))
        except NoNodeError as exc:
            raise ClusterError(f"set {name!r} was dropped while its relay ran") from exc

    def delete_relay_record(self, name: str, key: str) -> None:
        """Remove a record of the set's relay, if present."""
        try:
            self.zk.delete(self.relay_path(name, key))
        except NoNodeError:
            pass

    def update_skips(self, name: str, kind: str, position: str, info: dict[str, Any]) -> dict[str, Any]:
        """Add info at position under kind (``requested`` by an operator, ``skipped`` by the relay)
        in the set's ``relay/skips`` record; returns the record (pgshovel2.ops.skip)."""
        record = self.get_relay_record(name, "skips") or {"requested": {}, "skipped": {}}
        record.setdefault(kind, {})[position] = info
        self.put_relay_record(name, "skips", record)
        return record

    def election(self, name: str, who: str | None = None) -> Lock:
        """The set's relay election (a kazoo Lock; its path is created); who: this contender."""
        path = self.relay_path(name, "election")
        if who is not None:
            self.zk.ensure_path(path)
        return self.zk.Lock(path, who)

    def contenders(self, name: str) -> list[str]:
        """Identities of the set's relays in line order (the first holds the lock)."""
        try:
            return self.zk.Lock(self.relay_path(name, "election")).contenders()
        except NoNodeError:
            return []

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call listener(kazoo state) at every change of the ZooKeeper connection state."""
        self.zk.add_listener(listener)

    def remove_listener(self, listener: Callable[[str], None]) -> None:
        """Stop calling listener."""
        self.zk.remove_listener(listener)


def _check(results: list, what: str) -> None:
    for r in results:
        if isinstance(r, Exception):
            raise ClusterError(f"ZooKeeper refused to {what}: {r!r}")
