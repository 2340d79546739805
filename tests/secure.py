"""Session fixtures of the secured services (scripts/secure/*.sh, docs/security.rst), each started
on first use and stopped at the end of the session, with state under TEST_STACK_DIR/secure:

- ``secure_kafka``: a KRaft broker with SASL_SSL (SCRAM-SHA-512/256, PLAIN), mTLS and OAUTHBEARER
  listeners and StandardAuthorizer ACLs (:class:`SecureKafka`);
- ``secure_registry``: the schema registry behind nginx with TLS, client certificates and basic
  auth (:class:`SecureRegistry`);
- ``secure_zookeeper``: ZooKeeper requiring SASL DIGEST-MD5, with a mutual TLS port
  (:class:`SecureZooKeeper`);
- ``secure_postgres``: PostgreSQL with ssl=on, hostssl + scram-sha-256 only, the admin, relay,
  application and replica roles (:class:`SecurePostgres`); ``secure_db``: a fresh database on it.

Ports: the TEST_SECURE_* variables (tests/workers.py)."""

import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent
KAFKA_PORTS = ("SECURE_KAFKA_PORT", "SECURE_KAFKA_CONTROLLER_PORT", "SECURE_KAFKA_MTLS_PORT", "SECURE_KAFKA_OAUTH_PORT")
REGISTRY_PORTS = ("SECURE_REGISTRY_PORT", "SECURE_REGISTRY_BACKEND_PORT")
TOPIC_PREFIX = "secure"  # the relay and consumer users' topic ACLs cover topics with this prefix
RELAY, CONSUMER = "pgshovel-relay", "pgshovel-consumer"


def secure_env(ports: tuple[str, ...]) -> dict[str, str]:
    """The scripts' environment: the test stack's folder and the TEST_SECURE_* ports."""
    env = {**os.environ, "STACK_DIR": os.environ.get("TEST_STACK_DIR", str(REPO / ".stack-test")),
           "SECURE_KAFKA_TOPIC_PREFIX": TOPIC_PREFIX}
    env.update({key: str(port_of(f"TEST_{key}")) for key in ports})
    return env


class SecureKafka:
    """The secured broker: bootstrap (SASL_SSL), mtls and oauth (their listeners), the CA and
    client certificate, the users' password files, and helpers for client settings."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.dir = Path(env["STACK_DIR"]) / "secure"
        self.certs = self.dir / "certs"
        self.ca = str(self.certs / "ca.pem")
        self.client_cert, self.client_key = str(self.certs / "client.pem"), str(self.certs / "client.key")
        self.bootstrap = f"127.0.0.1:{env['SECURE_KAFKA_PORT']}"
        self.mtls = f"127.0.0.1:{env['SECURE_KAFKA_MTLS_PORT']}"
        self.oauth = f"127.0.0.1:{env['SECURE_KAFKA_OAUTH_PORT']}"

    def password_file(self, user: str) -> str:
        return str(self.dir / "kafka" / "users" / f"{user}.password")

    def password(self, user: str) -> str:
        return Path(self.password_file(user)).read_text().strip()

    def properties(self, user: str = RELAY, mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> dict:
        """librdkafka properties of a SASL_SSL client of user (password: a value or reference;
        default: a file: reference to the user's password file)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": mechanism, "sasl.username": user,
                "sasl.password": password or f"file:{self.password_file(user)}", "ssl.ca.location": self.ca}

    def write_properties(self, path: Path, props: dict, bootstrap: str | None = None) -> Path:
        """A client-properties file (Java syntax) holding props and bootstrap.servers."""
        lines = [f"bootstrap.servers={bootstrap or self.bootstrap}", *(f"{k}={v}" for k, v in props.items())]
        path.write_text("# written by tests/secure.py\n" + "\n".join(lines) + "\n")
        return path

    def admin(self) -> AdminClient:
        """An admin client as the super user admin."""
        props = self.properties("admin", password=self.password("admin"))
        return AdminClient({"bootstrap.servers": self.bootstrap, **props})

    def add_user(self, name: str, password: str, grants: list[tuple]) -> None:
        """A SCRAM-SHA-512 user with ALLOW ACLs grants: [(ResourceType, name prefix, [AclOperation])]."""
        admin = self.admin()
        upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result()
        bindings = [AclBinding(kind, prefix, ResourcePatternType.PREFIXED, f"User:{name}", "*", op,
                               AclPermissionType.ALLOW) for kind, prefix, ops in grants for op in ops]
        if bindings:
            for future in admin.create_acls(bindings, request_timeout=30).values():
                future.result()


class SecureRegistry:
    """The registry behind nginx: url (https), the CA, the client certificate and key, and the
    user info file (pgshovel:<password>) for file: references."""

    def __init__(self, env: dict[str, str]):
        self.dir = Path(env["STACK_DIR"]) / "secure"
        certs = self.dir / "certs"
        self.url = f"https://127.0.0.1:{env['SECURE_REGISTRY_PORT']}/apis/ccompat/v7"
        self.ca, self.cert, self.key = str(certs / "ca.pem"), str(certs / "client.pem"), str(certs / "client.key")
        self.user_info_file = str(self.dir / "registry" / "users" / "pgshovel.userinfo")
        self.password = (self.dir / "registry" / "users" / "pgshovel.password").read_text().strip()

    def env(self, user_info: str | None = None) -> dict[str, str]:
        """The PGSHOVEL_SCHEMA_REGISTRY* variables of a client (user_info: default a file: reference)."""
        return {"PGSHOVEL_SCHEMA_REGISTRY": self.url, "PGSHOVEL_SCHEMA_REGISTRY_CA": self.ca,
                "PGSHOVEL_SCHEMA_REGISTRY_CERT": self.cert, "PGSHOVEL_SCHEMA_REGISTRY_KEY": self.key,
                "PGSHOVEL_SCHEMA_REGISTRY_USER_INFO": user_info or f"file:{self.user_info_file}"}

    def settings(self):
        """pgshovel2.registryconf.RegistrySettings of the user pgshovel."""
        from pgshovel2.registryconf import RegistrySettings

        return RegistrySettings.load(self.url, f"file:{self.user_info_file}", self.ca, self.cert, self.key)


def _script(name: str, env: dict[str, str], action: str) -> None:
    subprocess.run([str(REPO / "scripts" / "secure" / f"{name}.sh"), action], env=env, check=True)


@pytest.fixture(scope="session")
def secure_kafka(base_stack):
    """The secured Kafka (after base_stack, which clears the test stack's folder), stopped at the end."""
    env = secure_env(KAFKA_PORTS)
    _script("kafka", env, "up")
    yield SecureKafka(env)
    _script("kafka", env, "down")


@pytest.fixture(scope="session")
def secure_registry(base_stack):
    """The schema registry behind TLS, client certificates and basic auth, stopped at the end."""
    env = secure_env(REGISTRY_PORTS)
    _script("registry", env, "up")
    yield SecureRegistry(env)
    _script("registry", env, "down")


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


@dataclass(frozen=True)
class SecurePostgres:
    """The secured PostgreSQL (scripts/secure/postgres.sh): TLS required, scram-sha-256 only,
    role pgshovel_relay with a client certificate too. folder: its state (secrets/<role>.password,
    secrets/pgpass); certs: the CA and certificates of scripts/secure/certs.sh."""

    port: int
    folder: Path
    certs: Path

    @property
    def passfile(self) -> Path:
        """The libpq password file holding every role's password (what the DSNs name)."""
        return self.folder / "secrets" / "pgpass"

    def password(self, role: str) -> str:
        """role's password (dba, pgshovel_admin, pgshovel_relay, app, replica)."""
        return (self.folder / "secrets" / f"{role}.password").read_text().strip()

    def dsn(self, role: str, dbname: str = "pgshovel", cert: bool | None = None) -> str:
        """A DSN of role verifying the server's certificate (sslmode=verify-full, the CA), its
        password from the passfile; cert (default: for pgshovel_relay, whose pg_hba line wants
        one): with the client certificate and key."""
        out = (f"host=localhost port={self.port} dbname={dbname} user={role} sslmode=verify-full "
               f"sslrootcert={self.certs / 'ca.pem'} passfile={self.passfile}")
        if cert or (cert is None and role == "pgshovel_relay"):
            out += f" sslcert={self.certs / 'client.pem'} sslkey={self.certs / 'client.key'}"
        return out

    def run(self, sql: str, dbname: str = "pgshovel", role: str = "dba", args: tuple | None = None) -> list[tuple]:
        """Run sql (autocommit) as role, with args (None: sql is sent as it is, % and all); the rows it
        returns (empty when none)."""
        conn = psycopg2.connect(self.dsn(role, dbname))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def fresh_database(self) -> str:
        """A new database (owner dba) with pgq, pgshovel2 and pgshovel2_decoder, CREATE on schema
        public taken from PUBLIC, CONNECT for pgshovel_admin, pgshovel_relay and app; its name."""
        name = f"sdb_{uuid.uuid4().hex[:8]}"
        self.run(f"CREATE DATABASE {name} OWNER dba")
        self.run(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC; "
                 f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO pgshovel_admin, pgshovel_relay, app")
        self.run("REVOKE CREATE ON SCHEMA public FROM PUBLIC; CREATE EXTENSION pgq; CREATE EXTENSION pgshovel2; "
                 "CREATE EXTENSION pgshovel2_decoder", name)
        return name

    def drop_database(self, name: str) -> None:
        """Drop database name with its replication slots (its sessions ended first), and take back
        from the set's roles what a test gave them server-wide (REPLICATION, membership in app)."""
        self.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                 "AND pid <> pg_backend_pid()", args=(name,))
        self.run("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                 args=(name,))
        self.run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        # roles are the server's, not the database's: what a test gave them goes, for the next test
        self.run("ALTER ROLE pgshovel_relay NOREPLICATION; ALTER ROLE pgshovel_admin NOREPLICATION; "
                 "REVOKE app FROM pgshovel_admin, pgshovel_relay")


@pytest.fixture(scope="session")
def secure_postgres(base_stack):
    """A running secured PostgreSQL (scripts/secure/postgres.sh): ssl=on, hostssl + scram-sha-256
    only (no trust, no plain host line), the relay role also needing a client certificate; a
    SecurePostgres. Depends on the test stack, whose start empties the folder it lives in."""
    env = {**base_stack.env, "SECURE_PG_PORT": str(port_of("TEST_SECURE_PG_PORT"))}
    script = str(REPO / "scripts" / "secure" / "postgres.sh")
    subprocess.run([script, "up"], env=env, check=True)
    secure = Path(env["STACK_DIR"]) / "secure"
    yield SecurePostgres(int(env["SECURE_PG_PORT"]), secure / "postgres", secure / "certs")
    subprocess.run([script, "down"], env=env, check=True)


@pytest.fixture
def secure_db(secure_postgres):
    """A fresh database on the secured PostgreSQL (SecurePostgres.fresh_database), dropped afterwards."""
    name = secure_postgres.fresh_database()
    yield name
    secure_postgres.drop_database(name)
