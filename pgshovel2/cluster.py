"""ZooKeeper store of a cluster's replication sets (kazoo).

Layout::

    /pgshovel2/<cluster>                       {"pgshovel_version": ..., "created_at": ...}
    /pgshovel2/<cluster>/sets/<set>            set record (JSON), znode version = set version
    /pgshovel2/<cluster>/sets/<set>/history/<n>  set record of version n
    /pgshovel2/<cluster>/sets/<set>/relay/snapshot  the relay's snapshot handoff record

No change data passes through ZooKeeper; it is the control plane only.
"""

import json
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from pgshovel2 import __version__
from pgshovel2.errors import ClusterError, ConflictError

ROOT = "/pgshovel2"


def _dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True).encode("utf-8")


class ClusterStore:
    """A cluster's znodes. Use as a context manager (connects and closes).

    hosts: ZooKeeper connect string, e.g. ``127.0.0.1:2181``; cluster: name.
    Raises ClusterError when ZooKeeper cannot be reached within timeout (s).
    """

    def __init__(self, hosts: str, cluster: str, timeout: float = 10.0):
        self.hosts, self.cluster, self.timeout = hosts, cluster, timeout
        self.zk = KazooClient(hosts=hosts, timeout=timeout)
        self.path = f"{ROOT}/{cluster}"

    def __enter__(self) -> "ClusterStore":
        try:
            self.zk.start(timeout=max(self.timeout, 10.0))
        except KazooTimeoutError as exc:
            self.zk.close()
            raise ClusterError(f"cannot reach ZooKeeper at {self.hosts} "
                               f"within {max(self.timeout, 10.0):g}s") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.zk.stop()
        self.zk.close()

    def set_path(self, name: str) -> str:
        """Znode of a set."""
        return f"{self.path}/sets/{name}"

    def initialize(self) -> bool:
        """Create the cluster's znodes; False when they already exist."""
        if self.zk.exists(self.path):
            return False
        self.zk.ensure_path(ROOT)
        tx = self.zk.transaction()
        tx.create(self.path, _dump({"pgshovel_version": __version__, "created_at": time.time()}))
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
            self.zk.set(self.path, _dump(record), version=version)
        except BadVersionError as exc:
            raise ConflictError(f"cluster {self.cluster!r} was changed by another command; retry") from exc

    def require_initialized(self) -> None:
        """Raise ClusterError unless ``pgshovel cluster initialize`` ran."""
        if not self.zk.exists(f"{self.path}/sets"):
            raise ClusterError(f"cluster {self.cluster!r} is not initialized in ZooKeeper at "
                               f"{self.hosts}: run 'pgshovel cluster initialize'")

    def list_sets(self) -> list[str]:
        """Names of the cluster's sets, sorted."""
        self.require_initialized()
        return sorted(self.zk.get_children(f"{self.path}/sets"))

    def get_set(self, name: str) -> tuple[dict[str, Any], int]:
        """(set record, znode version). Raises ClusterError if there is no such set."""
        self.require_initialized()
        try:
            data, stat = self.zk.get(self.set_path(name))
        except NoNodeError as exc:
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}") from exc
        return json.loads(data), stat.version

    def exists(self, name: str) -> bool:
        """True if the set exists."""
        return self.zk.exists(self.set_path(name)) is not None

    def create_set(self, name: str, record: dict[str, Any]) -> None:
        """Create a set's znodes atomically (set, history/1, relay)."""
        self.require_initialized()
        path = self.set_path(name)
        tx = self.zk.transaction()
        tx.create(path, _dump(record))
        tx.create(f"{path}/history", b"")
        tx.create(f"{path}/history/{record['version']:010d}", _dump(record))
        tx.create(f"{path}/relay", b"")
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise ClusterError(f"replication set {name!r} already exists in cluster {self.cluster!r}")
        _check(results, f"create set {name!r}")

    def update_set(self, name: str, record: dict[str, Any], znode_version: int) -> int:
        """Store record as the set's next version, atomically, if the set's znode is still at
        znode_version (from :meth:`get_set`); returns the new znode version.

        record["version"] must be the stored version + 1; history/<version> is created
        in the same ZooKeeper multi-op. Raises ConflictError when another admin changed the
        set first (nothing is written), ClusterError when ZooKeeper refuses.
        """
        path = self.set_path(name)
        tx = self.zk.transaction()
        tx.set_data(path, _dump(record), version=znode_version)
        tx.create(f"{path}/history/{record['version']:010d}", _dump(record))
        results = tx.commit()
        if any(isinstance(r, (BadVersionError, NodeExistsError)) for r in results):
            raise ConflictError(f"set {name!r} was changed by someone else since version "
                                f"{record['version'] - 1} was read; nothing was written: inspect it and retry")
        if isinstance(results[0], NoNodeError):
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}")
        _check(results, f"upgrade set {name!r}")
        return znode_version + 1

    def get_version(self, name: str, version: int) -> dict[str, Any]:
        """The set record of one version (history). Raises ClusterError if there is none."""
        try:
            data, _ = self.zk.get(f"{self.set_path(name)}/history/{version:010d}")
        except NoNodeError as exc:
            raise ClusterError(f"set {name!r} has no version {version}") from exc
        return json.loads(data)

    def history(self, name: str) -> list[int]:
        """Versions of the set kept in its history, ascending."""
        try:
            return sorted(int(v) for v in self.zk.get_children(f"{self.set_path(name)}/history"))
        except NoNodeError as exc:
            raise ClusterError(f"no replication set {name!r} in cluster {self.cluster!r}") from exc

    def delete_set(self, name: str, version: int) -> None:
        """Delete a set's znode and everything under it in one multi-op, if its znode
        version is still ``version``; a set already gone is not an error.

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

    def get_relay_record(self, name: str, key: str) -> dict[str, Any] | None:
        """A record of the set's relay (e.g. ``snapshot``), None if absent."""
        try:
            data, _ = self.zk.get(f"{self.set_path(name)}/relay/{key}")
        except NoNodeError:
            return None
        return json.loads(data)

    def put_relay_record(self, name: str, key: str, record: dict[str, Any]) -> None:
        """Create or replace a record of the set's relay."""
        path = f"{self.set_path(name)}/relay/{key}"
        if self.zk.exists(path):
            self.zk.set(path, _dump(record))
        else:
            try:
                self.zk.create(path, _dump(record))
            except NoNodeError as exc:
                raise ClusterError(f"set {name!r} was dropped while its relay ran") from exc


def _check(results: list, what: str) -> None:
    for r in results:
        if isinstance(r, Exception):
            raise ClusterError(f"ZooKeeper refused to {what}: {r!r}")
