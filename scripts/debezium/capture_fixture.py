"""Record real Debezium PostgreSQL change events as a test fixture.

Runs Debezium's PostgreSQL connector (``io.debezium:debezium-connector-postgres``,
the Connect plugin archive from Maven Central) in a Kafka Connect standalone
worker (``scripts/debezium/pom.xml``) against a PostgreSQL and a Kafka broker
(the test stack: ``scripts/stack.sh up`` with the TEST_* ports), with JSON
converters that include the Connect schemas, ``pgoutput`` and transaction
metadata, over two small tables: an initial snapshot, then three
transactions. A ``test_decoding`` slot created before the transactions
records the WAL facts of each one (the LSN of every change, BEGIN and COMMIT,
the xid and the commit time), so a test can check what Debezium derives from
them. Writes everything (every message of every topic the connector wrote, in
offset order, and the WAL facts) as one JSON file:

    python scripts/debezium/capture_fixture.py --dsn 'host=127.0.0.1 port=26432 dbname=pgshovel user=postgres' \\
        --bootstrap 127.0.0.1:30092 --out tests/fixtures/debezium-3.4.3.Final-postgres.json

Needs Java 17 and Maven (jars are cached under --work, default .cache/debezium).
Leaves nothing behind in the database (schema, slots and publication dropped).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parents[2]
DEBEZIUM = "3.4.3.Final"
PLUGIN = f"io.debezium:debezium-connector-postgres:{DEBEZIUM}:tar.gz:plugin"
PREFIX = SCHEMA = "dbzfix"
SLOT, AUDIT_SLOT = "dbzfix", "dbzfix_audit"
SNAPSHOT_ROWS = 5
# (statements of one transaction, data messages Debezium writes for it: events and tombstones)
TRANSACTIONS = [
    ([f"INSERT INTO {SCHEMA}.a VALUES (4, 'four')"], 1),
    ([f"UPDATE {SCHEMA}.a SET v = 'ONE' WHERE id = 1",
      f"DELETE FROM {SCHEMA}.b WHERE id = 1",
      f"INSERT INTO {SCHEMA}.b VALUES (3, 'three')",
      f"UPDATE {SCHEMA}.a SET v = 'TWO' WHERE id = 2"], 5),
    ([f"UPDATE {SCHEMA}.a SET id = 40 WHERE id = 4"], 3),
]


def log(msg: str) -> None:
    print(f"[capture] {msg}", file=sys.stderr, flush=True)


def fetch(work: Path) -> tuple[Path, Path]:
    """The Connect classpath folder and the plugin.path folder, fetched from Maven Central once."""
    libs, plugins = work / "libs", work / "plugins"
    if not (libs / ".complete").exists():
        log("fetching Kafka Connect from Maven Central")
        subprocess.run(["mvn", "-q", "-B", "-f", str(REPO / "scripts/debezium/pom.xml"),
                        "dependency:copy-dependencies", f"-DoutputDirectory={libs}"], check=True)
        (libs / ".complete").touch()
    if not (plugins / ".complete").exists():
        log(f"fetching {PLUGIN} from Maven Central")
        subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={PLUGIN}",
                        f"-DoutputDirectory={work}"], check=True)
        plugins.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-xzf", str(work / f"debezium-connector-postgres-{DEBEZIUM}-plugin.tar.gz"),
                        "-C", str(plugins), "--no-same-owner"], check=True)
        (plugins / ".complete").touch()
    return libs, plugins


def sql(dsn: str, *statements: str, fetch_all: bool = False) -> list:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            rows: list = []
            for statement in statements:
                cur.execute(statement)
                if fetch_all:
                    rows = cur.fetchall()
            return rows
    finally:
        conn.close()


def transaction(dsn: str, statements: list[str]) -> int:
    """Run statements in one transaction; returns its txid_current()."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            cur.execute("SELECT txid_current()")
            txid = cur.fetchone()[0]
        conn.commit()
        return txid
    finally:
        conn.close()


def cleanup(dsn: str) -> None:
    sql(dsn, f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
             f"WHERE slot_name IN ('{SLOT}', '{AUDIT_SLOT}') AND NOT active",
        f"DROP PUBLICATION IF EXISTS {SLOT}", f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def worker_files(work: Path, dsn: dict, bootstrap: str, port: int, plugins: Path) -> tuple[Path, Path, Path]:
    run = work / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "offsets").unlink(missing_ok=True)
    worker = run / "worker.properties"
    worker.write_text("\n".join([
        f"bootstrap.servers={bootstrap}",
        "key.converter=org.apache.kafka.connect.json.JsonConverter",
        "value.converter=org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable=true", "value.converter.schemas.enable=true",
        f"offset.storage.file.filename={run / 'offsets'}", "offset.flush.interval.ms=1000",
        f"plugin.path={plugins}", f"listeners=http://127.0.0.1:{port}", ""]))
    connector = run / "connector.properties"
    connector.write_text("\n".join([
        "name=dbzfix", "connector.class=io.debezium.connector.postgresql.PostgresConnector", "tasks.max=1",
        "plugin.name=pgoutput", f"database.hostname={dsn['host']}", f"database.port={dsn['port']}",
        f"database.user={dsn.get('user', 'postgres')}", f"database.password={dsn.get('password', '')}",
        f"database.dbname={dsn['dbname']}", f"topic.prefix={PREFIX}",
        f"table.include.list={SCHEMA}.a,{SCHEMA}.b", f"slot.name={SLOT}", f"publication.name={SLOT}",
        "publication.autocreate.mode=filtered", "provide.transaction.metadata=true", "snapshot.mode=initial",
        "topic.creation.default.replication.factor=1", "topic.creation.default.partitions=1", ""]))
    log4j = run / "log4j2.properties"
    log4j.write_text("\n".join([
        "rootLogger.level=INFO", "rootLogger.appenderRef.out.ref=out", "appender.out.type=Console",
        "appender.out.name=out", "appender.out.layout.type=PatternLayout",
        "appender.out.layout.pattern=%d %p %c{1} %m%n", ""]))
    return worker, connector, log4j


def wait(what: str, ready, timeout: float, proc: subprocess.Popen, logfile: Path):
    deadline = time.monotonic() + timeout
    while True:
        result = ready()
        if result:
            return result
        if proc.poll() is not None:
            raise SystemExit(f"Kafka Connect exited ({proc.returncode}) before {what}; see {logfile}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}; see {logfile}")
        time.sleep(0.5)


def read_all(bootstrap: str, topics: list[str]) -> dict[str, list[dict]]:
    """Every message of topics (one partition each), in offset order, keys/values parsed as JSON."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dbzfix-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(t, 0, 0) for t in topics])
        out: dict[str, list[dict]] = {t: [] for t in topics}
        pending = set(topics)
        while pending:
            msg = consumer.poll(30)
            if msg is None:
                raise SystemExit(f"no message within 30s from {sorted(pending)}")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.topic())
                continue
            parse = lambda b: None if b is None else json.loads(b)  # noqa: E731
            out[msg.topic()].append({"key": parse(msg.key()), "value": parse(msg.value())})
        return out
    finally:
        consumer.close()


def counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    present = admin.list_topics(timeout=10).topics
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dbzfix-counts"})
    try:
        return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] if t in present else 0
                for t in topics}
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "debezium")
    parser.add_argument("--connect-port", type=int, default=int(os.environ.get("DEBEZIUM_CONNECT_PORT", 28084)))
    args = parser.parse_args()
    libs, plugins = fetch(args.work)
    dsn = psycopg2.extensions.parse_dsn(args.dsn)
    cleanup(args.dsn)
    sql(args.dsn, f"CREATE SCHEMA {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.a (id int PRIMARY KEY, v text)",
        f"CREATE TABLE {SCHEMA}.b (id int PRIMARY KEY, v text)",
        f"ALTER TABLE {SCHEMA}.a REPLICA IDENTITY FULL", f"ALTER TABLE {SCHEMA}.b REPLICA IDENTITY FULL",
        f"INSERT INTO {SCHEMA}.a VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        f"INSERT INTO {SCHEMA}.b VALUES (1, 'b one'), (2, 'b two')")
    worker, connector, log4j = worker_files(args.work, dsn, args.bootstrap, args.connect_port, plugins)
    logfile = args.work / "run" / "connect.log"
    topics = [f"{PREFIX}.{SCHEMA}.a", f"{PREFIX}.{SCHEMA}.b", f"{PREFIX}.transaction"]
    log(f"starting Kafka Connect (log: {logfile})")
    with open(logfile, "w") as out:
        proc = subprocess.Popen(["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
                                 "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(connector)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        data_topics = topics[:2]
        wait("the snapshot", lambda: sum(counts(args.bootstrap, data_topics).values()) >= SNAPSHOT_ROWS,
             300, proc, logfile)
        wait("streaming", lambda: sql(args.dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = "
                                      f"'{SLOT}' AND active", fetch_all=True), 120, proc, logfile)
        sql(args.dsn, f"SELECT pg_create_logical_replication_slot('{AUDIT_SLOT}', 'test_decoding')")
        xids = [transaction(args.dsn, statements) for statements, _ in TRANSACTIONS]
        expected = SNAPSHOT_ROWS + sum(n for _, n in TRANSACTIONS)
        wait("the transactions' events", lambda: sum(counts(args.bootstrap, data_topics).values()) >= expected,
             120, proc, logfile)
        wal = sql(args.dsn, f"SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_changes('{AUDIT_SLOT}', "
                            "NULL, NULL, 'include-timestamp', 'on', 'include-xids', 'on')", fetch_all=True)
        time.sleep(2)  # the transaction topic's END records follow the data
        messages = read_all(args.bootstrap, topics)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        cleanup(args.dsn)
    fixture = {
        "about": f"Real change events of Debezium's PostgreSQL connector {DEBEZIUM} (Kafka Connect "
                 "JsonConverter, schemas.enable=true; plugin.name=pgoutput; provide.transaction.metadata=true; "
                 "REPLICA IDENTITY FULL), recorded by scripts/debezium/capture_fixture.py. 'wal': "
                 "test_decoding's view of the same transactions (lsn of each BEGIN, change and COMMIT).",
        "debezium": DEBEZIUM, "transactions": [s for s, _ in TRANSACTIONS], "xids": [str(x) for x in xids],
        "wal": [{"lsn": lsn, "xid": xid, "data": data} for lsn, xid, data in wal],
        "topics": messages}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"wrote {args.out}: " + ", ".join(f"{t} {len(m)}" for t, m in messages.items()))


if __name__ == "__main__":
    main()
