"""Relay high availability: three relays of one set under steady load; the active
one is SIGKILLed again and again (a standby takes over after the ZooKeeper
session timeout), then ZooKeeper itself is stopped past the session timeout
and restarted; nothing is lost or duplicated (the chaos harness's audit)."""

import json
import os
import signal
import statistics
import time
from datetime import datetime
from pathlib import Path

from pgshovel2.cluster import ClusterStore
from pgshovel2.relay import election
from tests.chaos import ChaosRun, Load
from tests.helpers import SESSION_TIMEOUT, RelayProcess, caught_up, pgshovel

KILLS = int(os.environ.get("PGSHOVEL2_FAILOVER_KILLS", "10"))


def _active(stack, cluster: str, set_name: str) -> dict | None:
    with ClusterStore(stack.zk, cluster) as store:
        return election.status(store, set_name)["active"]


def _wait_active(stack, cluster: str, set_name: str, not_pid: int | None, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = _active(stack, cluster, set_name)
        if active and active["pid"] != not_pid:
            return active
        time.sleep(0.05)
    raise AssertionError(f"no relay of {set_name} became active within {timeout}s")


def _resumed_at(relay: RelayProcess, after: float) -> float:
    """Wall-clock time of the relay's first 'resuming after tick' log line after time after."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in relay.log().splitlines():
            if "resuming after tick" in line:
                at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if at >= after - 0.01:
                    return at
        time.sleep(0.05)
    raise AssertionError(f"relay never resumed:\n{relay.log()}")


def test_three_relays_active_killed_repeatedly(stack, cluster, db, schema, tmp_path):
    run = ChaosRun(stack, cluster, db, schema, tmp_path, kills=0)
    run.create_set()
    first = run.start_relay()
    first.wait_for("snapshot done")
    first.stop(signal.SIGKILL)
    run._register_audit()
    relays: dict[int, RelayProcess] = {}
    spawned = iter(range(1, 1000))

    def spawn() -> RelayProcess:
        relay = RelayProcess(stack, cluster, run.set_name, "--max-transaction-messages", "500",
                             log_path=tmp_path / f"ha-{next(spawned):03d}.log")
        relays[relay.proc.pid] = relay
        return relay

    load = Load(stack, f'"{schema}"', tmp_path)
    load.start()
    takeovers, resumes = [], []
    try:
        for _ in range(3):
            spawn()
        # the killed first relay stays the leader until its ZooKeeper session expires
        active = _wait_active(stack, cluster, run.set_name, first.proc.pid)
        for _ in range(KILLS):
            time.sleep(1.5)
            status = pgshovel(stack, cluster, "relay", "status", run.set_name).stdout
            assert f"active {active['identity']}" in status and "standby: " in status
            victim = relays.pop(active["pid"])
            killed_at = time.time()
            victim.stop(signal.SIGKILL)
            active = _wait_active(stack, cluster, run.set_name, victim.proc.pid)
            takeovers.append(active["since"] - killed_at)
            resumes.append(_resumed_at(relays[active["pid"]], killed_at) - killed_at)
            spawn().wait_for("standing by")
        stack.script("stop", "zookeeper")
        time.sleep(float(SESSION_TIMEOUT) * 3)
        stack.script("start", "zookeeper")
        _wait_active(stack, cluster, run.set_name, None)
        time.sleep(3)
    finally:
        load.stop()
    caught_up(stack, cluster, run.set_name, timeout=300)
    alive = [r for r in relays.values() if r.proc.poll() is None]
    codes = [r.stop() for r in relays.values()]
    assert len(alive) == 3 and codes == [0, 0, 0], [r.log()[-2000:] for r in relays.values()]
    run._compare()
    report = run.report
    summary = {"kills": KILLS, "session_timeout_s": float(SESSION_TIMEOUT),
               "takeover_s": _stats(takeovers), "resumed_relaying_s": _stats(resumes),
               "transactions": report.source_transactions, "messages": report.expected_messages,
               "lost": report.lost, "duplicated": report.duplicated}
    print(f"\nfailover: {json.dumps(summary)}\nreport: {report}")
    if os.environ.get("PGSHOVEL2_FAILOVER_REPORT"):
        Path(os.environ["PGSHOVEL2_FAILOVER_REPORT"]).write_text(json.dumps(summary, indent=2))
    assert report.expected_messages > 500
    assert report.lost == 0, f"lost {report.lost}, first {report.first_lost}"
    assert report.duplicated == 0, f"duplicated {report.duplicated}, first {report.first_duplicated}"
    assert report.transactions_lost == report.transactions_duplicated == 0 and report.state_equal, \
        report.transactions_problem()
    # the bound: a standby takes over within 2 x the session timeout
    assert max(takeovers) <= 2 * float(SESSION_TIMEOUT), takeovers


def _stats(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}
