"""Monitoring and logging of the relay: the Prometheus endpoint scraped while it relays, logging
configured from a file, and errors reported to a Sentry endpoint (a local HTTP receiver)."""

import gzip
import http.server
import json
import socket
import threading
import time
import urllib.request

import pytest
import yaml

from pgshovel2 import names
from tests.helpers import RelayProcess, caught_up, messages, pgshovel, write_config
from tests.online import start_writers, stop_writers, wait_state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    """Samples of the pgshovel2 metrics: 'name{labels}' -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("pgshovel2_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@pytest.fixture
def table_set(stack, cluster, db, schema, tmp_path):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
    pgshovel(stack, cluster, "set", "create", "mon", str(write_config(tmp_path, stack, [{"schema": schema,
                                                                                           "name": "t"}])))
    return schema


def test_prometheus_endpoint_counts_what_the_relay_did(stack, cluster, db, table_set, relay_factory):
    port = _free_port()
    relay = relay_factory("mon", "--metrics-port", str(port))
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        for i in range(5):  # five source transactions, 40 changes
            cur.execute(f'INSERT INTO "{table_set}".t SELECT g, \'x\' FROM generate_series({i * 8 + 1}, {i * 8 + 8}) g')
    caught_up(stack, cluster, "mon")
    samples = _scrape(port)
    assert samples['pgshovel2_relay_changes_total{set="mon"}'] == 40
    assert samples['pgshovel2_relay_active{set="mon"}'] == 1
    assert samples['pgshovel2_relay_batches_total{set="mon"}'] >= 1
    assert samples['pgshovel2_relay_kafka_commit_seconds_count{set="mon"}'] >= samples[
        'pgshovel2_relay_batches_total{set="mon"}']
    relay.wait_for("queue lag")
    assert 'pgshovel2_relay_lag_seconds{set="mon"}' in _scrape(port)
    assert relay.stop() == 0


def test_logging_config_file(stack, cluster, table_set, relay_factory, tmp_path):
    log_file = tmp_path / "relay-from-config.log"
    config = tmp_path / "logging.yaml"
    config.write_text(yaml.safe_dump({
        "version": 1,
        "formatters": {"plain": {"format": "CONFIGURED %(levelname)s %(name)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "plain"}},
        "root": {"level": "INFO", "handlers": ["file"]}}))
    relay = relay_factory("mon", "--logging-config", str(config))
    deadline = threading.Event()
    for _ in range(600):
        if log_file.exists() and "snapshot done" in log_file.read_text():
            break
        deadline.wait(0.1)
    assert "CONFIGURED INFO pgshovel2.relay.loop snapshot done" in log_file.read_text()
    assert "snapshot done" not in relay.log()  # the default stderr handler is not used
    assert relay.stop() == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("handlers: {x: {class: no.such.Handler}}\n")
    proc = pgshovel(stack, cluster, "--logging-config", str(bad), "set", "list", check=False)
    assert proc.returncode == 1 and f"logging config {bad}" in proc.stderr


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        _Receiver.bodies.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_errors_reach_sentry(stack, cluster):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dsn = f"http://publickey@127.0.0.1:{server.server_port}/42"
    try:
        proc = pgshovel(stack, cluster, "--sentry-dsn", dsn, "set", "inspect", "nosuchset", check=False)
    finally:
        server.shutdown()
    assert proc.returncode == 1 and "no replication set 'nosuchset'" in proc.stderr
    assert any(b"no replication set 'nosuchset'" in b for b in _Receiver.bodies), _Receiver.bodies
    bad = pgshovel(stack, cluster, "--sentry-dsn", "not a dsn", "set", "list", check=False)
    assert bad.returncode == 1 and "--sentry-dsn" in bad.stderr


def test_set_status_shows_the_last_relay_error(stack, cluster, db, table_set, relay_factory):
    relay = relay_factory("mon")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:  # cut the relay off the database: it must retry and say why
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'"
                    " AND (application_name = '' OR application_name LIKE 'pgshovel2 relay %%')"
                    " AND query <> 'select pgq.ticker()'")  # not pgqd's
        cur.execute(f'INSERT INTO "{table_set}".t VALUES (1, \'after\')')
    relay.wait_for("interrupted")
    caught_up(stack, cluster, "mon")
    status = json.loads(pgshovel(stack, cluster, "set", "status", "mon", "--json").stdout)
    assert status["last_error"]["kind"] in ("OperationalError", "InterfaceError", "UnavailableError")
    assert "last relay error:" in pgshovel(stack, cluster, "set", "status", "mon").stdout
    assert relay.stop() == 0


def test_online_snapshot_rows_metric_equals_snapshot_end(stack, cluster, db, schema, tmp_path, relay_factory):
    """pgshovel2_relay_online_snapshot_rows (exposed as ..._total) counts the op r rows of an online
    snapshot under writers: scraped while it runs (at most the final count) and after it, it equals
    the event_count of the table's SNAPSHOT_END record."""
    table = f'"{schema}".mos'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {table} SELECT g, 0, 'x' FROM generate_series(1, 3000) g")
        cur.execute(f"ANALYZE {table}")  # reltuples: the estimate of the table's rows
    pgshovel(stack, cluster, "set", "create", "mos", str(write_config(
        tmp_path, stack, [{"schema": schema, "name": "mos"}], topic_prefix=f"mos{cluster}")))
    port = _free_port()
    relay = relay_factory("mos", "--metrics-port", str(port))
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, 3000)
    try:
        pgshovel(stack, cluster, "set", "snapshot", "mos", "--chunk-size", "100")
        relay.wait_for("online snapshot")
        during = _online_rows(port)
        wait_state(stack, cluster, "mos", "done")
    finally:
        stop_writers(stop, threads)
    caught_up(stack, cluster, "mos")
    after = _online_rows(port)
    ends = [v for _, v, _ in messages(stack, names.transactions_topic(f"mos{cluster}")) if v["type"] == "SNAPSHOT_END"]
    assert len(ends) == 1 and ends[0]["table"] == names.table_topic(f"mos{cluster}", schema, "mos"), ends
    assert after == ends[0]["event_count"] > 1000, (after, ends)
    assert during <= after, (during, after)
    estimated = [v for k, v in _scrape(port).items()
                 if k.startswith("pgshovel2_relay_online_snapshot_rows_estimated{") and 'set="mos"' in k]
    assert len(estimated) == 1 and 1000 < estimated[0] < 10000, estimated  # the writers move it a little
    assert relay.stop() == 0


def _online_rows(port: int) -> float:
    """The set mos's pgshovel2_relay_online_snapshot_rows sample (0 before its first chunk)."""
    found = [v for k, v in _scrape(port).items()
             if k.startswith("pgshovel2_relay_online_snapshot_rows_total{") and 'set="mos"' in k]
    assert len(found) <= 1, found
    return found[0] if found else 0.0


def test_unreachable_kafka_logs_a_few_lines(stack, cluster, table_set, tmp_path):
    """A relay whose broker refuses connections says so once per kind of line, not at every retry
    of librdkafka (which alternates "1/1 brokers are down" and "0/1 brokers are down" too)."""
    relay = RelayProcess(stack, cluster, "mon", "--bootstrap-servers", f"127.0.0.1:{_free_port()}",
                         log_path=tmp_path / "unreachable.log")
    time.sleep(15)
    relay.stop()
    lines = relay.log().splitlines()
    refused = [line for line in lines if "Connection refused" in line]
    down = [line for line in lines if "brokers are down" in line]
    assert 1 <= len(refused) <= 4 and len(down) <= 2, "\n".join(refused + down)


def _status_until(stack, cluster: str, set_name: str, done, timeout: float = 90) -> dict:
    """`set status --json` of set_name, asked again until done(status) holds (AssertionError after timeout s)."""
    deadline = time.monotonic() + timeout
    while True:
        status = json.loads(pgshovel(stack, cluster, "set", "status", set_name, "--json").stdout)
        if done(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"set status never showed it: {json.dumps(status, indent=1)[:3000]}")
        time.sleep(0.5)


def test_set_status_shows_kafka_down_while_the_relay_is_active(stack, cluster, table_set, tmp_path):
    """A relay whose broker refuses connections is still the active relay; set status must say its
    Kafka connection is down, since when and why (the relay's error events, relay/connections)."""
    started = time.time()
    relay = RelayProcess(stack, cluster, "mon", "--bootstrap-servers", f"127.0.0.1:{_free_port()}",
                         "--metrics-port", str(port := _free_port()), log_path=tmp_path / "unreachable.log")
    status = _status_until(stack, cluster, "mon", lambda s: s["relays"]["active"] is not None
                           and ((s.get("connections") or {}).get("kafka") or {}).get("up") is False)
    kafka = status["connections"]["kafka"]
    assert status["connections"]["relay"] == status["relays"]["active"]["identity"]
    assert "Connection refused" in kafka["error"] or "brokers are down" in kafka["error"], kafka
    assert started - 1 <= kafka["since"] <= kafka["error_at"] <= time.time(), (started, kafka)
    assert status["connections"]["postgresql"]["up"] is True, status["connections"]
    text = pgshovel(stack, cluster, "set", "status", "mon").stdout
    down = [line for line in text.splitlines() if line.strip().startswith("relay-kafka:")]
    assert len(down) == 1 and "DOWN since" in down[0] and "UTC" in down[0], text
    assert "not active now" not in down[0], text
    samples = _scrape(port)
    assert samples['pgshovel2_relay_connection_up{dependency="kafka",set="mon"}'] == 0, samples
    assert samples['pgshovel2_relay_connection_up{dependency="postgresql",set="mon"}'] == 1, samples
    assert relay.stop() == 0


def test_set_status_shows_a_healthy_relay_connected(stack, cluster, db, table_set, relay_factory):
    port = _free_port()
    relay = relay_factory("mon", "--metrics-port", str(port))
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{table_set}".t VALUES (1, \'x\')')
    caught_up(stack, cluster, "mon")
    status = json.loads(pgshovel(stack, cluster, "set", "status", "mon", "--json").stdout)
    states = status["connections"]
    assert states["relay"] == status["relays"]["active"]["identity"]
    assert {d: states[d]["up"] for d in ("kafka", "postgresql", "registry")} == \
        {"kafka": True, "postgresql": True, "registry": True}, states
    assert all(states[d]["error"] is None for d in ("kafka", "postgresql", "registry")), states
    text = pgshovel(stack, cluster, "set", "status", "mon").stdout
    for dependency in ("kafka", "postgresql", "registry"):
        assert f"relay-{dependency}:" in text and "DOWN" not in text, text
    samples = _scrape(port)
    assert all(samples[f'pgshovel2_relay_connection_up{{dependency="{d}",set="mon"}}'] == 1
               for d in ("kafka", "postgresql", "registry")), samples
    with db.cursor() as cur:  # a DBA tells the relay's sessions in pg_stat_activity
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgshovel2 relay mon'")
        assert cur.fetchone()[0] >= 1
    assert relay.stop() == 0
