"""The set config's ``heartbeat`` (pgshovel2.heartbeatconf): parsed, stored, refused naming the field."""

import pytest

from pgshovel2.config import SetConfig, parse_config
from pgshovel2.errors import ConfigError
from pgshovel2.heartbeatconf import HeartbeatConfig

LOGICAL = {"database": {"dsn": "dbname=x"}, "backend": "logical", "tables": ["t"]}
QUERY = "INSERT INTO ops.hb VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at"


@pytest.mark.parametrize("interval, seconds", [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), (3, 3.0), (None, 10.0)])
def test_parsed_and_stored(interval, seconds):
    beat = {"action_query": f"  {QUERY} "} | ({} if interval is None else {"interval": interval})
    cfg = parse_config({**LOGICAL, "heartbeat": beat}, "f.yaml")
    assert cfg.heartbeat == HeartbeatConfig(seconds, QUERY)
    assert SetConfig.from_dict(cfg.to_dict()) == cfg


def test_absent_and_old_records():
    cfg = parse_config(LOGICAL, "f.yaml")
    assert cfg.heartbeat == HeartbeatConfig() and cfg.heartbeat.action_query is None
    old = {k: v for k, v in cfg.to_dict().items() if k != "heartbeat"}
    assert SetConfig.from_dict(old).heartbeat == HeartbeatConfig()


@pytest.mark.parametrize("beat, backend, field", [
    ({"action_query": QUERY}, "trigger", "heartbeat"),
    ("every 10s", "logical", "heartbeat"),
    ({"action_query": QUERY, "interval_ms": 10}, "logical", "heartbeat.interval_ms"),
    ({"interval": "10s"}, "logical", "heartbeat.action_query"),
    ({"action_query": "  "}, "logical", "heartbeat.action_query"),
    ({"action_query": QUERY, "interval": "soon"}, "logical", "heartbeat.interval"),
    ({"action_query": QUERY, "interval": 0}, "logical", "heartbeat.interval"),
    ({"action_query": QUERY, "interval": True}, "logical", "heartbeat.interval"),
])
def test_refused_naming_the_field(beat, backend, field):
    with pytest.raises(ConfigError) as err:
        parse_config({**LOGICAL, "backend": backend, "heartbeat": beat}, "f.yaml")
    assert err.value.field == field and str(err.value).startswith(f"f.yaml: {field}: ")
