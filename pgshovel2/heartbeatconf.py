"""A logical set's heartbeat action query (set config ``heartbeat:``), Debezium's
``heartbeat.interval.ms`` and ``heartbeat.action.query``: an SQL statement the active relay runs in
the set's database every ``interval``, in a connection of its own, so a database where the set's
tables see no writes still gets some the slot decodes (e.g. an upsert into a captured heartbeat
table: its change reaches Kafka and consumers see the set alive). Parsed by :func:`parse` for
:func:`pgshovel2.config.parse_config`, read back by :func:`from_record`; run by
:mod:`pgshovel2.relay.monitor.heartbeat`.

The relay's own heartbeat (a logical decoding message every ``--heartbeat-interval`` while idle)
needs no configuration and keeps running alongside.
"""

import re
from dataclasses import dataclass
from typing import Any

from pgshovel2.errors import ConfigError

DEFAULT_INTERVAL = 10.0  # s, as Debezium's heartbeat.interval.ms examples
MIN_INTERVAL = 0.1  # s
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class HeartbeatConfig:
    """interval: seconds between two runs of action_query; action_query: the SQL statement, None
    for none (the default: no action query)."""

    interval: float = DEFAULT_INTERVAL
    action_query: str | None = None


def duration(value: Any, field: str, source: str) -> float:
    """Seconds of value: a number (seconds) or a string ``<number>[ms|s|m|h]`` (``10s``, ``500ms``).
    Raises ConfigError naming source and field for anything else or below MIN_INTERVAL."""
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value.strip())):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        seconds = None
    if seconds is None or seconds < MIN_INTERVAL:
        raise ConfigError(source, field, value, f"must be a duration of at least {MIN_INTERVAL:g}s: seconds, or a "
                          "number with ms, s, m or h (e.g. 10s)")
    return seconds


def parse(data: dict[str, Any], backend: str, source: str) -> HeartbeatConfig:
    """The config's ``heartbeat`` mapping (absent: none). Raises ConfigError naming the field: not a
    mapping, a bad interval, an empty action_query, or a set of another backend
    than logical (a trigger set's queue advances with PgQ's ticks)."""
    raw = data.get("heartbeat")
    if raw is None:
        return HeartbeatConfig()
    if not isinstance(raw, dict):
        raise ConfigError(source, "heartbeat", raw, "must be a mapping {interval: 10s, action_query: \"...\"}")
    # unknown fields: configmodel.unknown_fields, before any field is parsed
    if backend != "logical":
        raise ConfigError(source, "heartbeat", raw, "only a logical set has a heartbeat action query (a trigger "
                          "set's queue advances with PgQ's ticks)")
    query = raw.get("action_query")
    if not isinstance(query, str) or not query.strip():
        raise ConfigError(source, "heartbeat.action_query", query, "must be a non-empty SQL statement")
    interval = duration(raw.get("interval", DEFAULT_INTERVAL), "heartbeat.interval", source)
    return HeartbeatConfig(interval, query.strip())


def from_record(data: dict[str, Any] | None) -> HeartbeatConfig:
    """The stored ``heartbeat`` (absent in records before it existed: none)."""
    return HeartbeatConfig(**data) if data else HeartbeatConfig()
