"""Debezium, the benchmarks' reference peer: a Kafka Connect worker running Debezium's PostgreSQL
connector on the bench stack's database and broker.

The jars come from Maven Central through scripts/debezium/install.sh (Kafka Connect at the broker's
version, the connector's plugin archive unpacked into ``plugin.path``; cached in DEBEZIUM_HOME,
default .cache/debezium). The worker runs in distributed mode (exactly-once source support needs
it) with a group and internal topics of its own, its REST API on 127.0.0.1:CONNECT_PORT. Every
worker and connector setting used is in WORKER / CONNECTOR below and is copied into the results.
"""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg2
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peer.common import BOOTSTRAP, DSN, WORK, dies_with_bench

REPO = Path(__file__).resolve().parents[2]
CONNECT_PORT = int(os.environ.get("CONNECT_PORT", "28083"))
URL = f"http://127.0.0.1:{CONNECT_PORT}"
DEBEZIUM_VERSION = "3.4.3.Final"
HEAP = "-Xmx1g"
DEBEZIUM = {"debezium": False, "debezium_eos": True}  # the benches' Debezium variants -> exactly-once

# Worker settings besides the per-run group and topics. Producer settings as close to pgshovel2's
# relay as Kafka's Java client allows (lz4, acks=all, idempotence) and larger batches, as Debezium's
# docs suggest for throughput. linger 5 ms, Kafka's default: the relay's 100 ms is cut short by each
# of its commits, but at-least-once nothing ends a batch sooner.
WORKER = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "true",
    "value.converter.schemas.enable": "true",
    "config.storage.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "offset.storage.partitions": "1",
    "status.storage.partitions": "1",
    "offset.flush.interval.ms": "1000",
    "producer.linger.ms": "5",
    "producer.batch.size": "524288",
    "producer.compression.type": "lz4",
    "producer.acks": "all",
    "producer.enable.idempotence": "true",
}
# Debezium's throughput settings (its docs: "max.batch.size", "max.queue.size", "poll.interval.ms";
# defaults 2048, 8192, 500 ms). A short poll interval: the task sleeps that long whenever its queue is
# empty, which is latency at a steady rate.
CONNECTOR = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "plugin.name": "pgoutput",
    "publication.autocreate.mode": "disabled",
    "snapshot.mode": "no_data",
    "max.batch.size": "20480",
    "max.queue.size": "81920",
    "poll.interval.ms": "10",
    # pgshovel2's relays write logical messages (heartbeats) into the WAL; without this Debezium waits
    # for a <prefix>.message topic it never gets (docs/operations.rst, "Other logical decoding clients")
    "message.prefix.exclude.list": "pgshovel2\\..*",
}


def rest(method: str, path: str, body: dict | None = None, url: str = URL) -> tuple[int, str]:
    """(HTTP status, body text) of a request to the worker's REST API at url (default: the bench's);
    URLError when it is not up."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def topic_names() -> list[str]:
    """The names of the bench broker's topics."""
    return list(AdminClient({"bootstrap.servers": BOOTSTRAP}).list_topics(timeout=30).topics)


def delete_topics(topics: list[str], bootstrap: str = BOOTSTRAP) -> None:
    """Delete topics of the broker (default: the bench's), waiting for its answer; missing ones are fine."""
    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the answers are in
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def install(*extra: str) -> tuple[Path, Path]:
    """(libs, plugins) folders, fetched by scripts/debezium/install.sh when missing (Maven, network);
    extra: more plugins it knows by name (``jdbc``: Debezium's JDBC sink connector)."""
    out = subprocess.run([str(REPO / "scripts/debezium/install.sh"), *extra], check=True, capture_output=True,
                         text=True)
    home = Path(out.stdout.strip().splitlines()[-1])
    return home / "libs", home / "plugins"


class Worker:
    """A Kafka Connect distributed worker, REST API up when constructed; ``stop()`` ends it and deletes
    its internal topics. exactly_once: ``exactly.once.source.support=enabled`` (then every source
    task writes in Kafka transactions). bootstrap, port, work (its files), plugins (install's extra)
    and preexec: the bench's by default (a test passes its own stack's); extra: more worker
    settings. Raises SystemExit when it does not come up in 180 s."""

    def __init__(self, exactly_once: bool, bootstrap: str = BOOTSTRAP, port: int = CONNECT_PORT, work: Path = WORK,
                 plugins: tuple[str, ...] = (), preexec=dies_with_bench, extra: dict[str, str] | None = None):
        libs, plugin_path = install(*plugins)
        tag = f"bench-connect-{time.time_ns()}"
        self.bootstrap, self.url = bootstrap, f"http://127.0.0.1:{port}"
        self.topics = [f"{tag}-{k}" for k in ("configs", "offsets", "status")]
        self.settings = {**WORKER, "exactly.once.source.support": "enabled" if exactly_once else "disabled",
                         **(extra or {})}
        props = {"bootstrap.servers": bootstrap, "group.id": tag, "config.storage.topic": self.topics[0],
                 "offset.storage.topic": self.topics[1], "status.storage.topic": self.topics[2],
                 "listeners": self.url, "rest.advertised.host.name": "127.0.0.1", "rest.advertised.port": str(port),
                 "plugin.path": str(plugin_path), **self.settings}
        work.mkdir(parents=True, exist_ok=True)
        worker = work / f"{tag}.properties"
        worker.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = work / "connect-log4j2.properties"
        log4j.write_text("rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=out\nappender.out.type=Console\n"
                         "appender.out.name=out\nappender.out.layout.type=PatternLayout\n"
                         "appender.out.layout.pattern=%d %p %c{1} %m%n\nlogger.dbz.name=io.debezium\n"
                         "logger.dbz.level=INFO\n")
        self.log = work / f"{tag}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(["java", HEAP, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
                                          "org.apache.kafka.connect.cli.ConnectDistributed", str(worker)],
                                         stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
        self.wait("the REST API", lambda: self.rest("GET", "/connectors")[0] == 200, 180)

    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        """A request to this worker's REST API (:func:`rest`)."""
        return rest(method, path, body, self.url)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, what: str, ready, timeout: float) -> None:
        """Poll ready() (exceptions count as not ready) until true; SystemExit on timeout or exit."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except (OSError, psycopg2.Error):
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"Kafka Connect exited ({self.proc.returncode}) before {what}; see {self.log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}; see {self.log}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        delete_topics(self.topics, self.bootstrap)


def sql(*statements: str) -> None:
    conn = psycopg2.connect(DSN)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def slot_active(name: str) -> bool:
    conn = psycopg2.connect(DSN)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,))
            row = cur.fetchone()
            return bool(row and row[0])
    finally:
        conn.close()


class Connector:
    """Debezium's PostgreSQL connector ``name`` on tables (qualified names) of the bench database:
    its publication (FOR TABLE tables) and slot (pgoutput) created here, before any change to capture,
    so it streams every change committed after construction (snapshot.mode=no_data, no stored offset:
    it starts at the slot's position). ``start()`` registers it on worker; ``drop()`` removes the
    connector, slot, publication and its topics. Topic of table s.t: ``<name>.s.t``."""

    def __init__(self, name: str, tables: list[str], exactly_once: bool = False):
        self.name, self.tables = name, tables
        self.config = {**CONNECTOR, **self.database(), "topic.prefix": name, "slot.name": name,
                       "publication.name": name, "table.include.list": ",".join(tables)}
        if exactly_once:
            self.config["exactly.once.support"] = "required"
        sql(f"CREATE PUBLICATION {name} FOR TABLE {', '.join(tables)}",
            f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')")
        # one partition, as pgshovel2's table topics by default (the bench broker does not auto-create)
        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        for future in admin.create_topics([NewTopic(self.topic(t), 1, 1) for t in tables]).values():
            future.result()
        self.worker: Worker | None = None

    @staticmethod
    def database() -> dict[str, str]:
        dsn = psycopg2.extensions.parse_dsn(DSN)
        return {"database.hostname": dsn["host"], "database.port": dsn["port"], "database.user": dsn["user"],
                "database.password": dsn.get("password", ""), "database.dbname": dsn["dbname"]}

    def topic(self, table: str) -> str:
        return f"{self.name}.{table}"

    def start(self, worker: Worker) -> None:
        """Register on worker; returns once its slot is in use (streaming)."""
        self.worker = worker
        status, text = rest("POST", "/connectors", {"name": self.name, "config": self.config})
        if status >= 300:
            raise SystemExit(f"registering connector {self.name} failed: {status} {text}")
        worker.wait(f"connector {self.name} streaming", lambda: slot_active(self.name), 180)

    def drop(self) -> None:
        if self.worker is not None:
            rest("DELETE", f"/connectors/{self.name}")
            self.worker.wait(f"slot {self.name} released", lambda: not slot_active(self.name), 120)
        sql(f"SELECT pg_drop_replication_slot('{self.name}')", f"DROP PUBLICATION IF EXISTS {self.name}")
        delete_topics([self.topic(t) for t in self.tables])


def settings(exactly_once: bool) -> dict:
    """Every Debezium setting of a run, for the results JSON."""
    return {"debezium": DEBEZIUM_VERSION, "kafka_connect": "4.1.1", "mode": "distributed worker", "heap": HEAP,
            "worker": {**WORKER, "exactly.once.source.support": "enabled" if exactly_once else "disabled"},
            "connector": {**CONNECTOR, **({"exactly.once.support": "required"} if exactly_once else {})}}
