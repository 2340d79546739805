"""The relay's connection states (pgshovel2.relay.monitor.connections): published on a change only."""

from pgshovel2.relay.monitor.connections import KAFKA, POSTGRESQL, Connections, lines


def test_published_on_change_only():
    published, now = [], [100.0]
    states = Connections("s", "host:1", published.append, clock=lambda: now[0])
    states.up(KAFKA)
    states.up(KAFKA)  # every commit says so: no write
    now[0] = 110.0
    states.down(KAFKA, "Connection refused password=secret")
    now[0] = 111.0
    states.down(KAFKA, "1/1 brokers are down")  # the same outage
    assert len(published) == 2
    kafka = published[-1][KAFKA]
    assert kafka["up"] is False and kafka["since"] == kafka["error_at"] == 110.0
    assert "secret" not in kafka["error"]
    now[0] = 120.0
    states.up(KAFKA)
    assert len(published) == 3 and published[-1][KAFKA]["since"] == 120.0
    assert published[-1][KAFKA]["error_at"] == 110.0  # the last error stays, with its time


def test_lines():
    states = Connections("s", "host:1", lambda record: None, clock=lambda: 100.0)
    states.up(KAFKA)
    states.down(POSTGRESQL, "could not connect")
    record = {"relay": "host:1", "at": 100.0, KAFKA: states.state(KAFKA), POSTGRESQL: states.state(POSTGRESQL)}
    text = lines(record, "host:1", now=130.0)
    assert text[0].startswith("  relay-kafka:") and "up since 1970-01-01 00:01:40 UTC (30s)" in text[0]
    assert "DOWN since" in text[1] and "could not connect" in text[1] and "not active" not in text[1]
    assert all("not active now" in line for line in lines(record, "other:2", now=130.0))
    assert lines(None, None) == []
