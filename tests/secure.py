"""Fixtures of the secured services (scripts/secure/*.sh), session scoped: each starts on first
use, under the test stack's folder (``secure/<service>``) on its TEST_SECURE_* ports, and stops
at the end of the session. One fixture per service."""

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent


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
        """Drop database name with its replication slots (its sessions ended first)."""
        self.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                 "AND pid <> pg_backend_pid()", args=(name,))
        self.run("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                 args=(name,))
        self.run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.run("ALTER ROLE pgshovel_relay NOREPLICATION; ALTER ROLE pgshovel_admin NOREPLICATION")


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
