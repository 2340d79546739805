"""Session fixtures: a real stack (PostgreSQL+PgQ+pgqd, ZooKeeper, Kafka,
schema registry) on test ports under .stack-test, started once and stopped
at the end. Unit tests under tests/unit do not request it.

Stock PostgreSQL servers (tests/stock.py): ``stock_pg`` is one per selected major
(PGSHOVEL2_TEST_STOCK); ``server`` is Debian's PG 15 and each of them. A contract test module
runs on every server with one line that replaces its ``stack``:
``from tests.pgservers import PgServer, extra_port
from tests.stock import on_every_server as stack  # noqa: F401``. Tests using either are
marked ``stock`` (``make test-matrix`` runs them on 14, 16, 17 and 18)."""

import os
import signal
import subprocess
import uuid
from pathlib import Path

import psycopg2
import pytest

from tests.workers import port_of, separate_worker

separate_worker()  # under pytest-xdist, before anything reads a port: each worker has its own stack

from tests.pgservers import PgServer, extra_port  # noqa: E402
from tests.secure import secure_db, secure_kafka, secure_postgres, secure_registry, secure_zookeeper  # noqa: F401, E402
from tests.spark_cluster import spark_cluster  # noqa: F401, E402  (a fixture)
from tests.stock import SELECTION_ENV, StockServers, make_target, stock_majors, target_names  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PORTS = ("PG_PORT", "ZK_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "REGISTRY_PORT")


class Stack:
    """Endpoints of the test stack."""

    def __init__(self, env: dict):
        self.env = env
        self.dsn = f"host=127.0.0.1 port={env['PG_PORT']} dbname=pgshovel user=postgres"
        self.zk = f"127.0.0.1:{env['ZK_PORT']}"
        self.bootstrap = f"127.0.0.1:{env['KAFKA_PORT']}"
        self.registry = f"http://127.0.0.1:{env['REGISTRY_PORT']}/apis/ccompat/v7"

    def script(self, *args: str) -> None:
        subprocess.run([str(REPO / "scripts" / "stack.sh"), *args], env=self.env, check=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "stock: runs on stock PostgreSQL servers (PGSHOVEL2_TEST_STOCK; "
                                       "make test-matrix runs these on 14, 16, 17 and 18)")
    config.addinivalue_line("markers", "spark_cluster: submits jobs to a Spark standalone cluster "
                                       "(make test-spark; make test leaves them out: ~10 min each)")
    config.addinivalue_line("markers", "spark_job: runs a Spark job in its own JVM as a user runs it "
                                       "(spark/*.py, local[2]; make test-spark; make test leaves them out: "
                                       "~1 min each)")


def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if {"stock_pg", "server"} & fixtures:
            item.add_marker(pytest.mark.stock)
        if "spark_cluster" in fixtures:
            item.add_marker(pytest.mark.spark_cluster)


@pytest.fixture(scope="session")
def base_stack():
    """The running test stack; fresh state every session."""
    env = {**os.environ, "STACK_DIR": os.environ.get("TEST_STACK_DIR", str(REPO / ".stack-test"))}
    env.update({key: str(port_of(f"TEST_{key}")) for key in PORTS})
    s = Stack(env)
    s.script("down")
    subprocess.run(["rm", "-rf", env["STACK_DIR"]], check=True)
    s.script("up")
    yield s
    s.script("down")


@pytest.fixture(scope="session")
def stack(base_stack):
    """The test stack (PostgreSQL 15 with our C and PgQ, superuser dsn). A test module may
    replace it by the ``server`` targets (see the module docstring)."""
    return base_stack


@pytest.fixture(scope="session")
def stock_servers():
    """The session's stock servers (tests/stock.py), started on first use, stopped at the end."""
    servers = StockServers()
    yield servers
    servers.stop_all()


NO_STOCK = pytest.param(None, id="stock-none",
                        marks=pytest.mark.skip(reason=f"{SELECTION_ENV} selects no stock server"))


@pytest.fixture(scope="session", params=[pytest.param(m, id=f"stock{m}") for m in stock_majors()] or [NO_STOCK])
def stock_pg(request, stock_servers):
    """A running stock server (tests.stock.StockServer: major, port, dsn as app, admin_dsn,
    reset()) for each major of PGSHOVEL2_TEST_STOCK."""
    return stock_servers.get(request.param)


@pytest.fixture(scope="session", params=target_names(stock_majors()))
def server(request, base_stack, stock_servers):
    """A tests.stock.Target: "pg15" (the stack's, superuser, our C) then each stock server (as
    app): name, major, dsn, admin_dsn, has_our_c, is_superuser, and the stack's zk/bootstrap/registry."""
    return make_target(request.param, base_stack, stock_servers)


@pytest.fixture(params=["trigger", "logical"])
def backend(request) -> str:
    """The capture backend a test's sets use: the contract tests run once for each."""
    return request.param


@pytest.fixture
def db(stack):
    """An autocommit connection to the test database."""
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def cluster(stack):
    """A fresh, initialized cluster name (one per test keeps tests apart); its logical sets'
    replication slots are dropped afterwards."""
    from pgshovel2.cluster import ClusterStore

    name = f"t{uuid.uuid4().hex[:8]}"
    with ClusterStore(stack.zk, name) as store:
        store.initialize()
    yield name
    _drop_slots(stack, name)


def _drop_slots(stack, cluster: str) -> None:
    """Drop the replication slots of the cluster's logical sets (ending their walsenders): the
    session's servers would otherwise keep one per logical set of every test and run out of
    max_replication_slots. Best effort: a test may have stopped ZooKeeper or PostgreSQL."""
    from pgshovel2.cluster import ClusterStore
    from pgshovel2.setrecord import SlotCapture
    from tests.helpers import drop_slot

    try:
        with ClusterStore(stack.zk, cluster) as store:
            records = [store.get_set(n)[0] for n in store.list_sets()]
    except Exception:  # noqa: BLE001 -- teardown of whatever the test left
        return
    for record in records:
        if isinstance(record.capture, SlotCapture):
            drop_slot(record.dsn, record.capture.slot)


@pytest.fixture
def schema(stack, db):
    """A fresh schema for the test's tables; dropped afterwards (on a new
    connection: the test may have restarted PostgreSQL)."""
    name = f"s_{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{name}"')
    yield name
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA "{name}" CASCADE')
    conn.close()


@pytest.fixture
def relay_factory(stack, cluster, tmp_path):
    """start(set_name, *args) -> a RelayProcess of the cluster; all are killed afterwards."""
    from tests.helpers import RelayProcess

    relays = []

    def start(set_name: str, *args: str) -> "RelayProcess":
        relay = RelayProcess(stack, cluster, set_name, *args, log_path=tmp_path / f"{set_name}.log")
        relays.append(relay)
        return relay

    yield start
    for relay in relays:
        relay.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (2 cores) for the Spark tests, with the JDBC driver and Kafka connector jars."""
    from pgshovel2.sparkjobs import session

    s = session.session("local[2]", "pgshovel2-tests", settings={"spark.sql.shuffle.partitions": "2",
                                                                 "spark.ui.showConsoleProgress": "false"})
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def kill_leftover_relays():
    """SIGKILL the relays a test started and left running (a failed assertion skips its own cleanup)."""
    from tests.helpers import RelayProcess

    yield
    while RelayProcess.started:
        relay = RelayProcess.started.pop()
        if relay.proc.poll() is None:
            relay.proc.kill()
            relay.proc.wait(30)


@pytest.fixture
def target():
    """A fresh extra PostgreSQL 15 server (tests.pgservers, extra port 0): a replica target."""
    server = PgServer("target", extra_port(0))
    server.destroy()
    yield server.start()
    server.destroy()


@pytest.fixture(params=["native", "confluent"])
def producer_kind(request, monkeypatch):
    """Which producer KafkaSink makes in this test (PGSHOVEL2_NATIVE, read when it is made). The
    native extension must be installed (scripts/install.sh builds it): no skip."""
    if request.param == "native":
        import pgshovel2_native  # noqa: F401
    monkeypatch.setenv("PGSHOVEL2_NATIVE", "1" if request.param == "native" else "0")
    return request.param
