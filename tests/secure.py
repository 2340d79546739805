"""Fixtures of the secured services (scripts/secure/*.sh), session scoped: each starts on first
use, under the test stack's folder (``secure/<service>``) on its TEST_SECURE_* ports, and stops
at the end of the session. One fixture per service."""

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SecureZooKeeper:
    """The secured ZooKeeper: hosts (SASL required), tls_hosts (mutual TLS + SASL), the CA and
    client certificate files, and per user (``admin``, ``intruder``) the file of its password."""

    hosts: str
    tls_hosts: str
    folder: Path

    def password_file(self, user: str) -> Path:
        """File holding user's password (made by the script at its first start)."""
        return self.folder / "secrets" / f"{user}.password"

    def auth(self, user: str = "admin") -> str:
        """The --zookeeper-auth value of user: ``sasl:USER:file:PATH``."""
        return f"sasl:{user}:file:{self.password_file(user)}"

    @property
    def ca(self) -> Path:
        """CA certificate (PEM) of the server's and the client's certificates."""
        return self.folder / "certs" / "ca.pem"

    @property
    def cert(self) -> Path:
        """Client certificate (PEM)."""
        return self.folder / "certs" / "client.pem"

    @property
    def key(self) -> Path:
        """Client private key (PEM)."""
        return self.folder / "certs" / "client.key"

    def env(self, tls: bool = False, user: str = "admin") -> dict[str, str]:
        """PGSHOVEL_ZOOKEEPER_* variables of a pgshovel2 process connecting as user (over TLS)."""
        out = {"PGSHOVEL_ZOOKEEPER_HOSTS": self.tls_hosts if tls else self.hosts,
               "PGSHOVEL_ZOOKEEPER_AUTH": self.auth(user)}
        if tls:
            out.update(PGSHOVEL_ZOOKEEPER_CA=str(self.ca), PGSHOVEL_ZOOKEEPER_CERT=str(self.cert),
                       PGSHOVEL_ZOOKEEPER_KEY=str(self.key))
        return out


@pytest.fixture(scope="session")
def secure_zookeeper(base_stack):
    """A running secured ZooKeeper (scripts/secure/zookeeper.sh): SASL DIGEST-MD5 required on
    every connection, a TLS port wanting a client certificate; a SecureZooKeeper. Depends on the
    test stack, whose start empties the folder it lives in."""
    env = {**base_stack.env, "SECURE_ZK_PORT": str(port_of("TEST_SECURE_ZK_PORT")),
           "SECURE_ZK_TLS_PORT": str(port_of("TEST_SECURE_ZK_TLS_PORT"))}
    script = str(REPO / "scripts" / "secure" / "zookeeper.sh")
    subprocess.run([script, "up"], env=env, check=True)
    yield SecureZooKeeper(f"127.0.0.1:{env['SECURE_ZK_PORT']}", f"127.0.0.1:{env['SECURE_ZK_TLS_PORT']}",
                          Path(env["STACK_DIR"]) / "secure" / "zookeeper")
    subprocess.run([script, "down"], env=env, check=True)


def zookeeper_chroot(hosts: str) -> str:
    """hosts with a fresh chroot (created, open) on that ZooKeeper: a test that closes /pgshovel2
    to other principals does it there, not for the session's other tests."""
    chroot = f"/t{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        client.create(chroot, b"")
    finally:
        client.stop()
        client.close()
    return hosts + chroot
