"""Parallel test runs (pytest-xdist, ``make test`` runs two workers): worker gwN (N > 0) gets its
own test stack, extra and stock PostgreSQL servers and Spark cluster, on the ports of worker gw0
plus N * PORT_STEP and under ``.stack-test-gwN``, through the TEST_* variables the fixtures read.
gw0 and a run without xdist keep the defaults. A TEST_* variable already set is kept."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PORT_STEP = 300  # gw0 takes each base below and up to 9 ports after the extra and stock ones
DEFAULT_PORTS = {  # gw0's: the defaults every fixture reads through port_of
    "TEST_PG_PORT": 26432, "TEST_ZK_PORT": 23181, "TEST_KAFKA_PORT": 30092,
    "TEST_KAFKA_CONTROLLER_PORT": 30093, "TEST_REGISTRY_PORT": 29081,
    "TEST_EXTRA_PG_PORT": 26133, "TEST_STOCK_PG_PORT": 26150,
    "TEST_SPARK_MASTER_PORT": 28077, "TEST_SPARK_MASTER_WEBUI_PORT": 28080, "TEST_SPARK_WORKER_WEBUI_PORT": 28081,
    "TEST_SECURE_PG_PORT": 26470,  # tests/secure.py secure_postgres
    # the secured services (tests/secure.py, scripts/secure/)
    "TEST_SECURE_KAFKA_PORT": 30094, "TEST_SECURE_KAFKA_CONTROLLER_PORT": 30095, "TEST_SECURE_KAFKA_MTLS_PORT": 30096,
    "TEST_SECURE_KAFKA_OAUTH_PORT": 30097, "TEST_SECURE_REGISTRY_PORT": 29082,
    "TEST_SECURE_REGISTRY_BACKEND_PORT": 29083, "TEST_SECURE_ZK_PORT": 23183, "TEST_SECURE_ZK_TLS_PORT": 23184,
    "TEST_CONNECT_PORT": 28084,  # the Kafka Connect worker of the sink tests (test_debezium_jdbc_sink.py)
}


def port_of(name: str) -> int:
    """The port of TEST_* variable name: the environment's (set by hand, or by separate_worker),
    else gw0's default. Raises KeyError for a name not in DEFAULT_PORTS."""
    return int(os.environ.get(name, DEFAULT_PORTS[name]))


def worker_index() -> int:
    """N of the xdist worker gwN running this process (PYTEST_XDIST_WORKER); 0 without xdist.

    Raises ValueError on a worker id not of the form gwN."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        raise ValueError(f"PYTEST_XDIST_WORKER={worker!r}: expected gw<N>")
    return int(worker[2:])


def separate_worker() -> None:
    """Point this worker's fixtures at its own ports and stack folder (see the module docstring)."""
    index = worker_index()
    if index == 0:
        return
    for key, port in DEFAULT_PORTS.items():
        os.environ.setdefault(key, str(port + index * PORT_STEP))
    os.environ.setdefault("TEST_STACK_DIR", str(REPO / f".stack-test-gw{index}"))
