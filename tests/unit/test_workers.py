"""Parallel test workers (tests/workers.py) never share a port or a stack folder."""

import os

import pytest

from tests import workers

# Ports a worker takes from each base: extra servers use up to +9, stock servers +0..+9
# (14-18 and the failover pair at +8/+9), Spark workers' web UIs +0..+1.
SPANS = {"TEST_EXTRA_PG_PORT": 10, "TEST_STOCK_PG_PORT": 10, "TEST_SPARK_WORKER_WEBUI_PORT": 2}


def _taken(index: int, monkeypatch) -> tuple[set[int], str]:
    for key in [*workers.DEFAULT_PORTS, "TEST_STACK_DIR"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    workers.separate_worker()
    ports = set()
    for key in workers.DEFAULT_PORTS:
        first = workers.port_of(key)
        ports.update(range(first, first + SPANS.get(key, 1)))
    return ports, os.environ.get("TEST_STACK_DIR", ".stack-test")


def test_four_workers_take_disjoint_ports_and_folders(monkeypatch):
    seen_ports: set[int] = set()
    seen_dirs: set[str] = set()
    for index in range(4):
        with monkeypatch.context() as m:
            ports, folder = _taken(index, m)
        assert not ports & seen_ports, f"gw{index} shares ports {sorted(ports & seen_ports)}"
        assert folder not in seen_dirs
        assert max(ports) < 32768  # below Linux's ephemeral range, which outgoing connections use
        seen_ports |= ports
        seen_dirs.add(folder)


def test_a_port_set_by_hand_is_kept(monkeypatch):
    monkeypatch.setenv("TEST_PG_PORT", "27777")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.delenv("TEST_ZK_PORT", raising=False)
    workers.separate_worker()
    assert os.environ["TEST_PG_PORT"] == "27777"
    assert os.environ["TEST_ZK_PORT"] == str(workers.DEFAULT_PORTS["TEST_ZK_PORT"] + workers.PORT_STEP)


def test_a_worker_id_not_of_xdist_is_refused(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "master")
    with pytest.raises(ValueError, match="gw<N>"):
        workers.worker_index()
