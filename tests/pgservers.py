"""Extra PostgreSQL servers for replica and promotion tests, started the way
scripts/stack.sh starts the stack's own (its ``start``/``stop postgres`` and
``start``/``stop pgqd`` commands with another STACK_DIR and PG_PORT), plus
streaming replicas made with pg_basebackup.

Ports come from TEST_EXTRA_PG_PORT (default 26133-26139), directories are
``{TEST_STACK_DIR}-{name}``.
"""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg2

from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")


def query(dsn: str, text: str, args: tuple = ()) -> list[tuple]:
    """Rows of one autocommitted statement on dsn (empty for a statement without a result)."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(text, args)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def extra_port(index: int) -> int:
    """The index-th extra PostgreSQL port (0: the replica target)."""
    return port_of("TEST_EXTRA_PG_PORT") + index


class PgServer:
    """A PostgreSQL 15 server under {base}-{name} on port, database pgshovel, user postgres (trust).

    settings: server settings applied with ALTER SYSTEM at start (the server restarts once for
    them), e.g. {"max_prepared_transactions": "0"}.
    """

    def __init__(self, name: str, port: int, base: str | None = None, settings: dict[str, str] | None = None):
        base = base or os.environ.get("TEST_STACK_DIR", str(REPO / ".stack-test"))
        self.name, self.port = name, port
        self.dir = Path(f"{base}-{name}")
        self.data = self.dir / "pg" / "data"
        self.dsn = f"host=127.0.0.1 port={port} dbname=pgshovel user=postgres"
        self.env = {**os.environ, "STACK_DIR": str(self.dir), "PG_PORT": str(port)}
        self.settings = settings or {}

    def script(self, *args: str) -> None:
        subprocess.run([str(REPO / "scripts" / "stack.sh"), *args], env=self.env, check=True)

    def start(self) -> "PgServer":
        self.script("start", "postgres")
        if self.settings:
            for key, value in self.settings.items():
                self.query(f"ALTER SYSTEM SET {key} = '{value}'")
            self.script("stop", "postgres")
            self.script("start", "postgres")
        return self

    def stop(self) -> None:
        self.script("stop", "pgqd")
        self.script("stop", "postgres")

    def kill(self) -> None:
        """SIGKILL the postmaster (an unplanned crash of the machine, as far as clients can tell)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self.script("stop", "pgqd")

    def destroy(self) -> None:
        """Stop and remove everything of the server."""
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        return conn

    def query(self, text: str, args: tuple = ()) -> list[tuple]:
        return query(self.dsn, text, args)

    def basebackup_from(self, primary: "PgServer", app_name: str) -> "PgServer":
        """Make this server a streaming replica of primary (application_name app_name) and start it."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.data.mkdir(parents=True)
        self.data.chmod(0o700)
        (self.dir / "pg" / "run").mkdir()
        subprocess.run(["chown", "-R", "postgres:postgres", str(self.dir / "pg")], check=True)
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_basebackup", "-h", "127.0.0.1",
                        "-p", str(primary.port), "-U", "postgres", "-D", str(self.data), "-X", "stream",
                        "-c", "fast"], check=True)
        with open(self.data / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {self.port}\nunix_socket_directories = '{self.dir}/pg/run'\n"
                       f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=postgres "
                       f"application_name={app_name}'\nhot_standby = on\n")
        (self.data / "standby.signal").touch()
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        shutil.chown(self.data / "postgresql.auto.conf", "postgres", "postgres")
        shutil.chown(self.data / "standby.signal", "postgres", "postgres")
        return self.start()

    def promote(self) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D", str(self.data), "-w",
                        "promote"], check=True)

    def in_recovery(self) -> bool:
        return self.query("SELECT pg_is_in_recovery()")[0][0]
