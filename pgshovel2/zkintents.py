"""The admin intents of a cluster's ZooKeeper store (mixed into pgshovel2.cluster.ClusterStore).

An intent (``/pgshovel2/<cluster>/intents/<gid>``) records a running admin command and the
database to look at if it dies (``pgshovel cluster recover``); with a set it also holds the set's
admin lock (``/pgshovel2/<cluster>/locks/<set>``) in the same multi-op.
"""

import json
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pgshovel2.errors import ConflictError


def dump(data: dict[str, Any]) -> bytes:
    """data as a znode's bytes: JSON, sorted keys, UTF-8."""
    return json.dumps(data, sort_keys=True).encode("utf-8")


class IntentStore:
    """Intent znodes; the class using it provides zk (a started KazooClient), path (the
    cluster's znode) and intents_path."""

    zk: KazooClient
    path: str
    intents_path: str

    def record_intent(self, gid: str, dsn: str, set_name: str | None = None) -> None:
        """Create the intent znode of a running admin command (the database to look at if it dies).

        With set_name, also take the set's admin lock (``locks/<set>``) in the same multi-op:
        raises ConflictError naming the holder's intent when another command holds it.
        """
        self.zk.ensure_path(self.intents_path)
        if set_name is None:
            self.zk.create(f"{self.intents_path}/{gid}", dump({"dsn": dsn}))
            return
        self.zk.ensure_path(f"{self.path}/locks")
        txn = self.zk.transaction()
        txn.create(f"{self.intents_path}/{gid}", dump({"dsn": dsn, "lock": set_name}))
        txn.create(f"{self.path}/locks/{set_name}", gid.encode())
        if any(isinstance(r, Exception) for r in txn.commit()):
            try:
                holder = self.zk.get(f"{self.path}/locks/{set_name}")[0].decode()
            except NoNodeError:
                holder = "?"
            raise ConflictError(f"another admin command on set {set_name!r} is running (intent {holder}); "
                                "retry when it is done, or run 'pgshovel cluster recover' if it died")

    def update_intent(self, gid: str, **fields: Any) -> None:
        """Add fields to an intent's record (``{"dsn", "lock"?, "txid"?, "zk_step"?}``)."""
        path = f"{self.intents_path}/{gid}"
        data, stat = self.zk.get(path)
        self.zk.set(path, dump({**json.loads(data), **fields}), version=stat.version)

    def clear_intent(self, gid: str) -> None:
        """Remove an intent znode and the set lock it holds, if present."""
        record = self.intent_records().get(gid, {})
        try:
            self.zk.delete(f"{self.intents_path}/{gid}")
        except NoNodeError:
            pass
        if record.get("lock"):
            try:
                self.zk.delete(f"{self.path}/locks/{record['lock']}")
            except NoNodeError:
                pass

    def intents(self) -> dict[str, str]:
        """gid -> DSN of every recorded intent of the cluster."""
        return {gid: data["dsn"] for gid, data in self.intent_records().items()}

    def intent_records(self) -> dict[str, dict[str, Any]]:
        """gid -> the intent's record of every recorded intent of the cluster."""
        try:
            children = self.zk.get_children(self.intents_path)
        except NoNodeError:
            return {}
        out = {}
        for gid in children:
            try:
                data, _ = self.zk.get(f"{self.intents_path}/{gid}")
            except NoNodeError:
                continue
            out[gid] = json.loads(data)
        return out
