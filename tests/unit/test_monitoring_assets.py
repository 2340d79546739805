"""The monitoring assets shipped in monitoring/ work: the alert rules pass ``promtool check rules``
and their unit tests (``promtool test rules``: an idle set raises nothing, a relay stopped on a DDL
raises PgshovelRelayStalled, ...), the Grafana dashboard's queries parse as PromQL, and every metric
either names is one the relay exports (docs/metrics.rst). promtool comes from Debian's prometheus
package (scripts/install.sh unpacks it into .cache/prometheus; PROMTOOL overrides)."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from scripts.metrics_doc import reference

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
PROMTOOL = os.environ.get("PROMTOOL") or str(REPO / ".cache" / "prometheus" / "promtool")
METRIC = re.compile(r"\bpgshovel2_[a-z_]+")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    assert Path(PROMTOOL).exists(), f"no promtool at {PROMTOOL}: run scripts/install.sh (or set PROMTOOL)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=MONITORING)


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def _exported() -> set[str]:
    return set(re.findall(r"``(pgshovel2_[a-z_]+)``", reference())) | {
        f"pgshovel2_relay_kafka_commit_seconds_{s}" for s in ("sum", "count")}


def test_alert_rules_check_and_pass_their_unit_tests():
    checked = _promtool("check", "rules", "pgshovel2-alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", "pgshovel2-alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_dashboard_queries_are_promql(tmp_path):
    exprs = [e.replace("$__rate_interval", "5m").replace("$set", ".*") for e in _dashboard_exprs()]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e}
                                                         for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump(rules))
    checked = _promtool("check", "rules", str(tmp_path / "dashboard-rules.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("asset", ["pgshovel2-alerts.yml", "grafana-dashboard.json"])
def test_every_metric_named_is_exported(asset):
    named = set(METRIC.findall((MONITORING / asset).read_text()))
    assert named and named <= _exported(), sorted(named - _exported())
