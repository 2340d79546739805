"""A cluster's znodes made safe: ``pgshovel cluster secure`` (also run by ``cluster upgrade``).

- ACLs: every znode of the cluster (and ``/pgshovel2`` when it is open to the world) gets the
  ACL of the command's ZooKeeper settings (pgshovel2.zkauth: the authenticated principal with all
  rights, plus ``--zookeeper-acl`` entries); :func:`acl_report` shows what each znode has.
- No secret at rest: every JSON znode of the cluster (set records, their ``history/<n>``,
  intents and the ZooKeeper steps they carry, relay records) is rewritten without literal
  secrets: a ``dsn`` field keeps everything but its password (pgshovel2.redact.strip_dsn; a
  reference such as ``password=env:VAR`` stays), any other text is masked
  (pgshovel2.redact.text). The set version does not change: the DSN still names the same
  database, and running relays go on (pgshovel2.relay.election compares DSNs without secrets);
  processes that start afterwards read the password from ~/.pgpass, PGPASSWORD or a service file.
"""

import json
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE

from pgshovel2 import redact
from pgshovel2.cluster import ROOT, ClusterStore
from pgshovel2.zkauth import acl_text


def znodes(store: ClusterStore) -> list[str]:
    """Every znode of the cluster, its own first, parents before their children."""
    out, todo = [], [store.path]
    while todo:
        path = todo.pop(0)
        try:
            children = store.zk.get_children(path)
        except NoNodeError:
            continue
        out.append(path)
        todo.extend(f"{path}/{child}" for child in sorted(children))
    return out


def _acl_of(store: ClusterStore, path: str) -> list[str]:
    return sorted(acl_text(a) for a in store.zk.get_acls(path)[0])


def acl_report(store: ClusterStore) -> dict[str, Any]:
    """{"acl": the cluster znode's ACL entries, "differs": {path: entries} of the znodes whose ACL is
    another, "open": paths readable by anyone (world:anyone)} (entries as scheme:id:perms)."""
    own = _acl_of(store, store.path)
    differs, open_to_all = {}, []
    for path in znodes(store):
        try:
            acl = _acl_of(store, path)
        except NoNodeError:
            continue
        if acl != own:
            differs[path] = acl
        if any(entry.startswith("world:anyone:") for entry in acl):
            open_to_all.append(path)
    return {"acl": own, "differs": differs, "open": open_to_all}


def apply_acl(store: ClusterStore) -> list[str]:
    """Give every znode of the cluster the settings' ACL (and /pgshovel2 when it is open to the
    world); returns what was done. Nothing when the settings have no ACL."""
    wanted = store.auth.acl()
    if not wanted:
        return ["ZooKeeper ACLs: none configured (--zookeeper-auth, --zookeeper-acl): znodes left as they are"]
    text = sorted(acl_text(a) for a in wanted)
    paths = znodes(store)
    if store.zk.exists(ROOT) and store.zk.get_acls(ROOT)[0] == OPEN_ACL_UNSAFE:
        paths.insert(0, ROOT)
    changed = 0
    for path in paths:
        try:
            if _acl_of(store, path) != text:
                store.zk.set_acls(path, wanted)
                changed += 1
        except NoNodeError:  # an ephemeral or lock node that went away meanwhile
            continue
    return [f"ZooKeeper ACLs: {', '.join(text)} on {changed} znode(s) ({len(paths) - changed} had it already)"]


def _clean(value: Any, key: str = "") -> Any:
    if isinstance(value, str):
        return redact.strip_dsn(value) if key == "dsn" and redact.literal_secrets(value) else redact.text(value)
    if isinstance(value, dict):
        return {k: _clean(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def strip_secrets(store: ClusterStore) -> list[str]:
    """Rewrite every JSON znode of the cluster that holds a literal secret without it (module
    docstring); returns what was done. A znode changed meanwhile is read and rewritten again."""
    cleaned = []
    for path in znodes(store):
        for _ in range(5):
            try:
                data, stat = store.zk.get(path)
                record = json.loads(data)
            except NoNodeError:
                break
            except ValueError:  # not JSON: a lock's gid, a prefix claim's set name
                break
            new = _clean(record)
            if new == record:
                break
            try:
                store.zk.set(path, json.dumps(new, sort_keys=True).encode("utf-8"), version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                break
            cleaned.append(path[len(store.path) + 1:])
            break
    if not cleaned:
        return ["secrets at rest: no znode of the cluster holds a password"]
    return [f"secrets at rest: removed the password from {len(cleaned)} znode(s) ({', '.join(cleaned)}); "
            "admin commands and relays read it from ~/.pgpass, PGPASSWORD or a service file from now on "
            "(or a reference: set repoint NAME --dsn '... password=env:VAR')"]


def secure(store: ClusterStore) -> list[str]:
    """:func:`strip_secrets` then :func:`apply_acl`; returns both's lines."""
    store.require_initialized()
    return strip_secrets(store) + apply_acl(store)
