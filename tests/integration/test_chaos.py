"""The fault-injection run (see tests/chaos.py): >= 10 relay kills, one restart
of Kafka, PostgreSQL and ZooKeeper (down longer than the session timeout), a crash
of Kafka (SIGKILL) and of PostgreSQL (-m immediate), each once with the relay running
(it must recover by itself) and once with the relay SIGKILLed at the same moment, and
a fenced zombie relay, under steady pgbench load; 0 lost, 0 duplicated.

``make chaos`` runs the same with PGSHOVEL2_CHAOS_KILLS=100 and keeps each backend's report:
PGSHOVEL2_CHAOS_REPORT's path with the backend before its suffix (chaos-<time>-trigger.json).
"""

import os
from pathlib import Path

from tests.chaos import ChaosRun


def report_path(path: Path, backend: str) -> Path:
    """Where backend's report goes: path with "-<backend>" before its suffix, so that the
    backends of one run do not overwrite each other's."""
    return path.with_name(f"{path.stem}-{backend}{path.suffix}")


def test_chaos_exactly_once(stack, cluster, db, schema, tmp_path, backend):
    kills = int(os.environ.get("PGSHOVEL2_CHAOS_KILLS", "10"))
    run = ChaosRun(stack, cluster, db, schema, tmp_path, kills=kills, seed=kills, backend=backend)
    try:
        report = run.run()
    finally:
        stack.script("up")  # whatever a failed run left stopped
    if os.environ.get("PGSHOVEL2_CHAOS_REPORT"):
        report.dump(report_path(Path(os.environ["PGSHOVEL2_CHAOS_REPORT"]), backend))
    print(f"\nchaos report: {report}")
    assert report.kills >= kills and report.failpoint_kills > 0
    assert report.service_restarts == {"kafka": 1, "postgres": 1, "zookeeper": 1, "kafka crash": 1,
                                       "postgres crash": 1, "kafka crash + relay kill": 1,
                                       "postgres crash + relay kill": 1}
    assert not report.relay_exits, "a relay did not survive an outage:\n" + "\n".join(report.relay_exits)
    assert report.zombies_fenced == 1  # fenced by Kafka, or stood down (session lost) without writing
    assert report.expected_messages > 1000
    assert report.lost == 0, f"lost {report.lost}, first {report.first_lost}"
    assert report.duplicated == 0, f"duplicated {report.duplicated}, first {report.first_duplicated}"
    assert report.transactions_lost == report.transactions_duplicated == 0, report.transactions_problem()
    assert report.state_equal
    run.inject_duplicate()  # the comparison must notice one extra message
    run._compare()
    assert run.report.duplicated == 1 and run.report.lost == 0
