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
# The typed table: (column, type, SQL of row 1, row 2, row 3); rows 1-2 in the snapshot, row 3
# inserted and row 1 updated to row 3's values (but its id) in one more transaction. Debezium's
# events of it are compared value for value and schema for schema with ours
# (tests/integration/test_debezium_recorded.py).
TYPED = [
    ("s", "smallint", "7", "-32768", "NULL"),
    ("i", "integer", "2147483647", "NULL", "0"),
    ("bg", "bigint", "-9007199254740993", "0", "NULL"),
    ("r", "real", "1.5", "-0.25", "NULL"),
    ("dp", "double precision", "3.141592653589793", "1e-300", "NULL"),
    ("n", "numeric(10,4)", "123456.7891", "-0.0001", "NULL"),
    ("vn", "numeric", "1.50", "-12345678901234567890.123", "100.00"),
    ("m", "money", "'1234.56'", "'-0.01'", "NULL"),
    ("bo", "boolean", "true", "false", "NULL"),
    ("tx", "text", "'O''Brien é 🐘'", "''", "NULL"),
    ("vc", "varchar(20)", "'short'", "NULL", "'x'"),
    ("ch", "char(3)", "'ab'", "NULL", "'abc'"),
    ("by", "bytea", "'\\x00ff10'::bytea", "''::bytea", "NULL"),
    ("u", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "NULL", "'00000000-0000-0000-0000-000000000000'"),
    ("dt", "date", "'2024-02-29'", "'1970-01-01'", "'0001-01-01'"),
    ("tm", "time", "'23:59:59.999999'", "'00:00:00'", "NULL"),
    ("tm3", "time(3)", "'12:34:56.789'", "'00:00:00'", "NULL"),
    ("tmz", "time with time zone", "'12:34:56.5+03'", "'00:00:00-01:30'", "'23:59:59.000001+00'"),
    ("ts", "timestamp", "'2024-02-29 12:34:56.789012'", "'1999-12-31 23:59:59'", "'1900-01-01 00:00:00'"),
    ("ts3", "timestamp(3)", "'2024-02-29 12:34:56.789'", "NULL", "'1970-01-01 00:00:00'"),
    ("tz", "timestamptz", "'2024-02-29 12:34:56.789012+03'", "NULL", "'1970-01-01 00:00:00+00'"),
    ("iv", "interval", "'1 year 2 mons 3 days 04:05:06.5'", "'-00:00:01'", "NULL"),
    ("j", "json", "'{\"a\": [1, null, \"x\"]}'", "'null'", "NULL"),
    ("jb", "jsonb", "'{\"b\": 2, \"a\": [1.50]}'", "'[]'", "NULL"),
    ("x", "xml", "'<a b=\"1\">t</a>'", "NULL", "'<e/>'"),
    ("ia", "integer[]", "'{1,NULL,3}'", "'{}'", "NULL"),
    ("ta", "text[]", "'{\"a,b\",NULL,\"\"}'", "NULL", "'{x}'"),
    ("na", "numeric(5,2)[]", "'{1.50,-2}'", "NULL", "NULL"),
    ("ip", "inet", "'192.168.0.1/24'", "'::1'", "NULL"),
    ("mac", "macaddr", "'08:00:2b:01:02:03'", "NULL", "NULL"),
    ("bt", "bit(3)", "B'101'", "NULL", "B'001'"),
    ("vb", "bit varying(20)", "B'1011001110'", "B''", "NULL"),
    ("b1", "bit(1)", "B'1'", "B'0'", "NULL"),
    ("en", f"{SCHEMA}.mood", "'happy'", "'sad'", "NULL"),
    ("rg", "int4range", "'[1,5)'", "'empty'", "NULL"),
    ("pt", "point", "'(1.5,-2)'", "NULL", "'(0,1e300)'"),
    ("ci", "citext", "'MiXeD'", "NULL", "NULL"),
    ("hs", "hstore", "'a=>1, b=>NULL'", "''", "'\"k\\\\\\\"x\"=>\"é\"'"),
    ("lt", "ltree", "'Top.Science'", "NULL", "NULL"),
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


def typed_setup() -> list[str]:
    """The typed table's DDL and its two snapshot rows."""
    cols = ", ".join(f"{c} {t}" for c, t, *_ in TYPED)
    return ["CREATE EXTENSION IF NOT EXISTS citext", "CREATE EXTENSION IF NOT EXISTS hstore",
            "CREATE EXTENSION IF NOT EXISTS ltree", f"CREATE TYPE {SCHEMA}.mood AS ENUM ('sad', 'happy')",
            f"CREATE TABLE {SCHEMA}.typed (id int PRIMARY KEY, {cols})",
            f"ALTER TABLE {SCHEMA}.typed REPLICA IDENTITY FULL",
            *(f"INSERT INTO {SCHEMA}.typed VALUES ({rid}, {', '.join(c[1 + rid] for c in TYPED)})"
              for rid in (1, 2))]


def typed_changes() -> list[str]:
    """One transaction: row 3 inserted, row 1 updated to row 3's values."""
    return [f"INSERT INTO {SCHEMA}.typed VALUES (3, {', '.join(c[4] for c in TYPED)})",
            f"UPDATE {SCHEMA}.typed SET {', '.join(f'{c[0]} = {c[4]}' for c in TYPED)} WHERE id = 1"]


def worker_files(work: Path, dsn: dict, bootstrap: str, port: int, plugins: Path,
                 modes: list[str] = ()) -> tuple[Path, Path, Path]:
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
        f"table.include.list={SCHEMA}.a,{SCHEMA}.b,{SCHEMA}.typed", f"slot.name={SLOT}", f"publication.name={SLOT}",
        "publication.autocreate.mode=filtered", "provide.transaction.metadata=true", "snapshot.mode=initial",
        "topic.creation.default.replication.factor=1", "topic.creation.default.partitions=1", *modes, ""]))
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


def delete_topics(bootstrap: str) -> None:
    """Delete the topics an earlier capture left (the connector's prefix), so only this run's messages
    are read."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    old = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{PREFIX}.")]
    for topic, future in (admin.delete_topics(old).items() if old else ()):
        future.result()
        log(f"deleted topic {topic} of an earlier capture")
    while old and any(t in admin.list_topics(timeout=10).topics for t in old):
        time.sleep(0.5)


def counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    present = admin.list_topics(timeout=10).topics
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dbzfix-counts"})
    try:
        return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] if t in present else 0
                for t in topics}
    finally:
        consumer.close()


def _payload(record: dict) -> dict:
    value = record.get("value") or {}
    return value.get("payload", value) or {}


def _about_typed(record: dict) -> bool:
    """Whether a transaction-topic record is the END of the typed table's transaction (only END
    records list their data collections)."""
    return any(c.get("data_collection", "").endswith(".typed")
               for c in _payload(record).get("data_collections") or [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "debezium")
    parser.add_argument("--connect-port", type=int, default=int(os.environ.get("DEBEZIUM_CONNECT_PORT", 28084)))
    parser.add_argument("--mode", action="append", default=[], metavar="PROPERTY=VALUE",
                        help="a connector setting other than Debezium's default (e.g. decimal.handling.mode=string); "
                             "recorded in the fixture's 'modes'")
    args = parser.parse_args()
    libs, plugins = fetch(args.work)
    dsn = psycopg2.extensions.parse_dsn(args.dsn)
    cleanup(args.dsn)
    delete_topics(args.bootstrap)
    sql(args.dsn, f"CREATE SCHEMA {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.a (id int PRIMARY KEY, v text)",
        f"CREATE TABLE {SCHEMA}.b (id int PRIMARY KEY, v text)",
        f"ALTER TABLE {SCHEMA}.a REPLICA IDENTITY FULL", f"ALTER TABLE {SCHEMA}.b REPLICA IDENTITY FULL",
        f"INSERT INTO {SCHEMA}.a VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        f"INSERT INTO {SCHEMA}.b VALUES (1, 'b one'), (2, 'b two')",
        *typed_setup())
    worker, connector, log4j = worker_files(args.work, dsn, args.bootstrap, args.connect_port, plugins, args.mode)
    logfile = args.work / "run" / "connect.log"
    topics = [f"{PREFIX}.{SCHEMA}.a", f"{PREFIX}.{SCHEMA}.b", f"{PREFIX}.transaction"]
    typed_topic = f"{PREFIX}.{SCHEMA}.typed"
    log(f"starting Kafka Connect (log: {logfile})")
    with open(logfile, "w") as out:
        proc = subprocess.Popen(["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
                                 "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(connector)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        data_topics = topics[:2]
        wait("the snapshot", lambda: sum(counts(args.bootstrap, data_topics).values()) >= SNAPSHOT_ROWS
             and counts(args.bootstrap, [typed_topic])[typed_topic] >= 2, 300, proc, logfile)
        wait("streaming", lambda: sql(args.dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = "
                                      f"'{SLOT}' AND active", fetch_all=True), 120, proc, logfile)
        sql(args.dsn, f"SELECT pg_create_logical_replication_slot('{AUDIT_SLOT}', 'test_decoding')")
        xids = [transaction(args.dsn, statements) for statements, _ in TRANSACTIONS]
        expected = SNAPSHOT_ROWS + sum(n for _, n in TRANSACTIONS)
        wait("the transactions' events", lambda: sum(counts(args.bootstrap, data_topics).values()) >= expected,
             120, proc, logfile)
        wal = sql(args.dsn, f"SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_changes('{AUDIT_SLOT}', "
                            "NULL, NULL, 'include-timestamp', 'on', 'include-xids', 'on')", fetch_all=True)
        transaction(args.dsn, typed_changes())
        wait("the typed table's events", lambda: counts(args.bootstrap, [typed_topic])[typed_topic] >= 4,
             120, proc, logfile)
        time.sleep(2)  # the transaction topic's END records follow the data
        messages = read_all(args.bootstrap, topics + [typed_topic])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        cleanup(args.dsn)
    typed_messages = messages.pop(typed_topic)
    typed_ids = {_payload(m)["id"] for m in messages[f"{PREFIX}.transaction"] if _about_typed(m)}
    messages[f"{PREFIX}.transaction"] = [m for m in messages[f"{PREFIX}.transaction"]
                                         if _payload(m).get("id") not in typed_ids]
    fixture = {
        "about": f"Real change events of Debezium's PostgreSQL connector {DEBEZIUM} (Kafka Connect "
                 "JsonConverter, schemas.enable=true; plugin.name=pgoutput; provide.transaction.metadata=true; "
                 "REPLICA IDENTITY FULL; every other setting Debezium's default), recorded by "
                 "scripts/debezium/capture_fixture.py. 'wal': test_decoding's view of the transactions of "
                 "tables a and b (lsn of each BEGIN, change and COMMIT); 'typed': a table of many types (its "
                 "columns, the SQL of its rows, the statements of its one streamed transaction, and its "
                 "messages), whose transaction records are left out of the transaction topic's.",
        "debezium": DEBEZIUM, "transactions": [s for s, _ in TRANSACTIONS], "xids": [str(x) for x in xids],
        "wal": [{"lsn": lsn, "xid": xid, "data": data} for lsn, xid, data in wal],
        "topics": messages, "modes": args.mode,
        "typed": {"columns": [list(c) for c in TYPED], "setup": typed_setup(), "changes": typed_changes(),
                  "messages": typed_messages}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"wrote {args.out}: " + ", ".join(f"{t} {len(m)}" for t, m in messages.items()))


if __name__ == "__main__":
    main()
