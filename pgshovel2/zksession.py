"""Starting a ZooKeeper session as a principal, with errors that say what ZooKeeper refused.

:func:`start` connects (and logs in: kazoo does SASL and digest on connect); :func:`check_access`
reads the first existing znode of a list, so that a refused login or a principal the ACL leaves
out stops the command before it reads or writes anything, with the hosts, the mechanism and the
znode named.
"""

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionLoss, NoAuthError, SASLException, SessionClosedRequireSaslError
from kazoo.handlers.threading import KazooTimeoutError

from pgshovel2.errors import ClusterError
from pgshovel2.zkauth import ZooKeeperAuth


def start(zk: KazooClient, hosts: str, auth: ZooKeeperAuth, timeout: float) -> None:
    """zk.start(timeout); on failure zk is closed and ClusterError raised: ZooKeeper unreachable
    within timeout (s; with TLS, a handshake that failed ends so too), or the login refused."""
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError as exc:
        zk.close()
        tls = " (TLS: check the CA, the client certificate and the server's secure port)" if auth.tls else ""
        raise ClusterError(f"cannot reach ZooKeeper at {hosts} within {timeout:g}s with "
                           f"{auth.describe()}{tls}") from exc
    except (ConnectionLoss, AuthFailedError, SASLException, SessionClosedRequireSaslError) as exc:
        zk.close()
        raise ClusterError(refused(hosts, auth, exc)) from exc


def refused(hosts: str, auth: ZooKeeperAuth, exc: Exception) -> str:
    """The message of a login ZooKeeper did not accept."""
    if auth.mechanism == "sasl":
        return (f"ZooKeeper at {hosts} did not accept the SASL DIGEST-MD5 login of user {auth.user!r} "
                f"({type(exc).__name__}): wrong password or unknown user; nothing was read or written")
    return (f"ZooKeeper at {hosts} closed the connection ({type(exc).__name__}) with {auth.describe()}: "
            "it may require authentication (--zookeeper-auth); nothing was written")


def check_access(zk: KazooClient, hosts: str, auth: ZooKeeperAuth, paths: list[str]) -> None:
    """Read the first of paths that exists (none: nothing to check); raise ClusterError naming the
    hosts, the mechanism and the znode when ZooKeeper refuses this principal or the session."""
    path = paths[0]
    try:
        path = next((p for p in paths if zk.exists(p)), None)
        if path is not None:
            zk.get(path)
    except NoAuthError as exc:
        hint = "wrong password, or " if auth.mechanism == "digest" else ""
        raise ClusterError(f"ZooKeeper at {hosts} refuses {auth.describe()} access to {path} (NoAuth): {hint}"
                           "the znode's ACL does not grant this principal (cluster inspect shows the ACLs, to a "
                           "principal that has them); nothing was written") from exc
    except ConnectionLoss as exc:  # kazoo's connection loop ends on a refused SASL login: start() returned
        raise ClusterError(refused(hosts, auth, exc)) from exc
    except (AuthFailedError, SessionClosedRequireSaslError) as exc:
        raise ClusterError(f"ZooKeeper at {hosts} requires authentication ({type(exc).__name__}); this client has "
                           f"{auth.describe()}: give --zookeeper-auth sasl:USER:REF (or PGSHOVEL_ZOOKEEPER_AUTH); "
                           "nothing was written") from exc
