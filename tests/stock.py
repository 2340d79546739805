"""Stock PostgreSQL servers for the tests: no pgshovel2 C code, no PgQ, and a non-superuser
application role, like a managed service (RDS, Cloud SQL). scripts/pg-stock.sh fetches the
binaries (Zonky's embedded-postgres-binaries, Maven Central) and starts/stops the servers.

Which majors: env PGSHOVEL2_TEST_STOCK, comma-separated (default "14,17"; "14,16,17,18" is the
matrix of ``make test-matrix``; "" or "none" selects none). Ports: TEST_STOCK_PG_PORT (default
26150) + the major's index in KNOWN_MAJORS, so a major keeps its port whatever the selection.
Directories: ``{TEST_STACK_DIR}-stock{major}``.
"""

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from tests.pgservers import query
from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent
KNOWN_MAJORS = (14, 16, 17, 18)
SELECTION_ENV = "PGSHOVEL2_TEST_STOCK"
DEFAULT_SELECTION = "14,17"


def stock_majors(environ: dict | None = None) -> list[int]:
    """The stock majors selected by PGSHOVEL2_TEST_STOCK, in the order given.

    Raises ValueError naming the variable for anything but known majors.
    """
    raw = (os.environ if environ is None else environ).get(SELECTION_ENV, DEFAULT_SELECTION).strip()
    if raw.lower() in ("", "none"):
        return []
    majors = []
    for part in raw.split(","):
        if not part.strip().isdigit() or int(part) not in KNOWN_MAJORS:
            raise ValueError(f"{SELECTION_ENV}={raw!r}: {part.strip()!r} is not one of the stock majors "
                             f"{', '.join(map(str, KNOWN_MAJORS))} (or '' / 'none' for no stock server)")
        if int(part) not in majors:
            majors.append(int(part))
    return majors


def stock_port(major: int) -> int:
    """The TCP port (on 127.0.0.1) of the stock server of major."""
    return port_of("TEST_STOCK_PG_PORT") + KNOWN_MAJORS.index(major)


class StockServer:
    """One stock PostgreSQL server of the test session, through scripts/pg-stock.sh.

    dsn: role app (LOGIN REPLICATION, not superuser, owner of database pgshovel): what pgshovel2
    must work with. admin_dsn: superuser postgres on the same database, for test set-up only.
    """

    def __init__(self, major: int, port: int | None = None, base: str | None = None):
        base = base or os.environ.get("TEST_STACK_DIR", str(REPO / ".stack-test"))
        self.major, self.port = major, port or stock_port(major)
        self.dir = Path(f"{base}-stock{major}")
        self.dsn = f"host=127.0.0.1 port={self.port} dbname=pgshovel user=app"
        self.admin_dsn = f"host=127.0.0.1 port={self.port} dbname=pgshovel user=postgres"
        self.env = {**os.environ, "STACK_DIR": base, "STOCK_PORT": str(self.port)}

    def script(self, *args: str) -> None:
        """Run scripts/pg-stock.sh args with this server's directory and port."""
        subprocess.run([str(REPO / "scripts" / "pg-stock.sh"), *args], env=self.env, check=True)

    def start(self) -> "StockServer":
        """Fetch the binaries when missing (quick when present), then start a fresh server."""
        self.script("fetch", str(self.major))
        self.script("down", str(self.major))
        self.script("up", str(self.major))
        return self

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.script("down", str(self.major))

    def stop_clean(self) -> None:
        """Fast shutdown, data kept (a standby receives every WAL record first); start() must
        not be used to start it again (it re-creates the server): use resume()."""
        self.script("stop", str(self.major))

    def resume(self) -> None:
        """Start the server again on its existing data directory."""
        self.script("up", str(self.major))

    def promote(self) -> None:
        """pg_ctl promote (waits until the standby accepts writes)."""
        self.script("promote", str(self.major))

    def configure(self, settings: dict[str, str]) -> None:
        """ALTER SYSTEM SET each setting (as postgres) and reload; settings needing a restart
        take effect at the next resume()."""
        conn = self.connect(admin=True)
        try:
            with conn.cursor() as cur:
                for key, value in settings.items():
                    cur.execute(f"ALTER SYSTEM SET {key} = %s", (value,))
                cur.execute("SELECT pg_reload_conf()")
        finally:
            conn.close()

    def connect(self, admin: bool = False, dbname: str = "pgshovel"):
        """An autocommit connection as app (admin: as postgres) to dbname."""
        dsn = self.admin_dsn if admin else self.dsn
        conn = psycopg2.connect(dsn.replace("dbname=pgshovel", f"dbname={dbname}"))
        conn.autocommit = True
        return conn

    def query(self, text: str, args: tuple = (), admin: bool = False) -> list[tuple]:
        """Rows of one statement (empty for statements without a result) on database pgshovel."""
        return query(self.admin_dsn if admin else self.dsn, text, args)

    def reset(self) -> None:
        """Drop every replication slot and database pgshovel (its sessions too), and create it
        again, empty and owned by app. Roles other tests created stay."""
        conn = self.connect(admin=True, dbname="postgres")
        try:
            with conn.cursor() as cur:
                drop_slots(cur)
                cur.execute("DROP DATABASE IF EXISTS pgshovel WITH (FORCE)")
                cur.execute("CREATE DATABASE pgshovel OWNER app")
                cur.execute("GRANT CREATE ON DATABASE pgshovel TO app")
        finally:
            conn.close()


def make_standby(primary: StockServer, standby: StockServer, slot: str) -> None:
    """Make standby (same major, its own port and base, not running) a physical streaming standby
    of primary without pg_basebackup: a physical slot on the primary, a clean stop of the
    primary, a copy of its data directory, then both started. The standby streams through slot
    and synchronizes failover slots (PostgreSQL 17+: sync_replication_slots, primary_conninfo
    with dbname, hot_standby_feedback); the primary waits for slot before sending logical
    changes (synchronized_standby_slots), so no logical slot gets ahead of the standby."""
    primary.query("SELECT pg_create_physical_replication_slot(%s, true)", (slot,), admin=True)
    settings = {"hot_standby_feedback": "on"}
    if primary.major >= 17:
        settings["synchronized_standby_slots"] = slot
    primary.configure(settings)
    primary.stop_clean()
    data = standby.dir / "data"
    subprocess.run(["rm", "-rf", str(standby.dir)], check=True)
    (standby.dir / "run").mkdir(parents=True)
    subprocess.run(["cp", "-a", str(primary.dir / "data"), str(data)], check=True)
    (data / "postmaster.pid").unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", str(data / "pg_replslot" / slot)], check=True)  # the primary's, not ours
    conninfo = f"host=127.0.0.1 port={primary.port} user=postgres dbname=pgshovel application_name=standby"
    lines = [f"port = {standby.port}", f"unix_socket_directories = '{standby.dir}/run'",
             f"primary_conninfo = '{conninfo}'", f"primary_slot_name = '{slot}'", "hot_standby = on",
             "hot_standby_feedback = on"]
    if primary.major >= 17:
        lines += ["sync_replication_slots = on", "synchronized_standby_slots = ''"]
    with open(data / "postgresql.auto.conf", "a") as conf:
        conf.write("\n".join(lines) + "\n")
    (data / "standby.signal").touch()
    subprocess.run(["chown", "-R", "postgres:postgres", str(standby.dir)], check=True)
    primary.resume()
    standby.resume()


def drop_slots(cur, attempts: int = 50) -> None:
    """Drop all replication slots, ending the sessions that hold them (which takes a moment)."""
    for _ in range(attempts):
        cur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active")
        cur.execute("SELECT slot_name FROM pg_replication_slots WHERE NOT active")
        for (slot,) in cur.fetchall():
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        cur.execute("SELECT count(*) FROM pg_replication_slots")
        if cur.fetchone()[0] == 0:
            return
        time.sleep(0.1)
    raise AssertionError("replication slots still held after their sessions were terminated")


class StockServers:
    """The session's stock servers, started on first use and all stopped by stop_all()."""

    def __init__(self):
        self.running: dict[int, StockServer] = {}

    def get(self, major: int) -> StockServer:
        if major not in self.running:
            self.running[major] = StockServer(major).start()
        return self.running[major]

    def stop_all(self) -> None:
        while self.running:
            self.running.popitem()[1].stop()


@dataclass
class Target:
    """A PostgreSQL server a contract test runs on, with the session's ZooKeeper, Kafka and
    registry: it stands in for the ``stack`` fixture's object (dsn, zk, bootstrap, registry, env,
    script), so helpers taking a stack take it too.

    name: "pg15" (Debian's, superuser, our C extension and PgQ) or "stock<major>".
    dsn: what pgshovel2 connects with (postgres on pg15, app on stock servers).
    admin_dsn: a superuser's, for test set-up. stock: the StockServer, None on pg15.
    Note: ``script`` still drives the PG 15 stack (stop/crash postgres acts on pg15 only).
    """

    name: str
    major: int
    dsn: str
    admin_dsn: str
    has_our_c: bool
    is_superuser: bool
    stack: object
    stock: StockServer | None = None

    @property
    def zk(self) -> str:
        return self.stack.zk

    @property
    def bootstrap(self) -> str:
        return self.stack.bootstrap

    @property
    def registry(self) -> str:
        return self.stack.registry

    @property
    def env(self) -> dict:
        return self.stack.env

    def script(self, *args: str) -> None:
        self.stack.script(*args)


def target_names(majors: list[int]) -> list[str]:
    """The ``server`` fixture's parameters: pg15 first, then the selected stock servers."""
    return ["pg15", *(f"stock{m}" for m in majors)]


def make_target(name: str, stack, servers: StockServers) -> Target:
    """The Target called name ("pg15" or "stock<major>"), starting its stock server if needed."""
    if name == "pg15":
        return Target(name, 15, stack.dsn, stack.dsn, has_our_c=True, is_superuser=True, stack=stack)
    stock = servers.get(int(name.removeprefix("stock")))
    return Target(name, stock.major, stock.dsn, stock.admin_dsn, has_our_c=False, is_superuser=False,
                  stack=stack, stock=stock)


@pytest.fixture(scope="session")
def on_every_server(server) -> Target:
    """Import as ``stack`` into a test module to run its tests on every ``server`` target."""
    return server
