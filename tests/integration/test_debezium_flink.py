"""Apache Flink's own Debezium consumers read pgshovel2's debezium envelope, both backends:
``debezium-json`` (from a file of the topic's values; the schemaless form, and the default form with
Connect schemas through ``debezium-json.schema-include``) and ``debezium-avro-confluent``
(Flink's Kafka connector on the topic itself, read_committed, schemas from the registry).
Flink rebuilds the table from snapshot rows, inserts, updates (with their before image),
deletes and key updates.

Needs a Python with apache-flink (``PGSHOVEL_TEST_PYFLINK``, else ``$FLINK_VENV`` or
.cache/flink-venv, which scripts/install.sh makes) and, for Avro, the Flink jars
scripts/install.sh fetches from Maven Central into ``$FLINK_JARS`` (.cache/flink-jars)."""

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from pgshovel2 import names
from pgshovel2.consumer.connectjson import decimal_text
from pgshovel2.ops.verify import read_topics
from tests.helpers import caught_up, pgshovel, write_config

REPO = Path(__file__).resolve().parents[2]
SET = "dbz"


def _pyflink() -> str | None:
    if os.environ.get("PGSHOVEL_TEST_PYFLINK"):
        return os.environ["PGSHOVEL_TEST_PYFLINK"]
    venv = Path(os.environ.get("FLINK_VENV") or REPO / ".cache" / "flink-venv")
    return str(venv / "bin" / "python") if (venv / "bin" / "python").exists() else None


PYFLINK = _pyflink()
FLINK_JARS = Path(os.environ.get("FLINK_JARS") or REPO / ".cache" / "flink-jars")
AVRO_JARS = sorted(str(p) for p in FLINK_JARS.glob("*.jar")) if (FLINK_JARS / ".complete").exists() else []
FLINK_COLUMNS = [["id", "INT"], ["v", "STRING"], ["n", "DECIMAL(10, 2)"], ["ts", "TIMESTAMP_LTZ(6)"]]
# Flink's Avro formats map timestamps of precision 3 at most (timestamp-millis): a timestamp-micros
# value (WIRE.md; Debezium's MicroTimestamp is the same long) is read as BIGINT
AVRO_COLUMNS = [*FLINK_COLUMNS[:3], ["ts", "BIGINT"]]
TS_TEXT = "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
TS_MICROS = "(extract(epoch FROM ts) * 1000000)::int8::text"
needs_pyflink = pytest.mark.skipif(not PYFLINK, reason="PGSHOVEL_TEST_PYFLINK: path of a Python with apache-flink")


def flink_changelog(columns: list, options: dict, jars: list[str], cwd: Path) -> list[dict]:
    """Run tests/integration/pyflink_changelog.py over a source table (columns, WITH options); the changelog."""
    spec = {"columns": columns, "options": options, "jars": jars}
    proc = subprocess.run([PYFLINK, str(Path(__file__).with_name("pyflink_changelog.py")), json.dumps(spec)],
                          capture_output=True, text=True, timeout=600, cwd=cwd)
    causes = [line for line in proc.stderr.splitlines() if "Exception" in line or "Caused by" in line]
    assert proc.returncode == 0, "\n".join(causes[:20]) or proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def relay_changes(stack, cluster, db, schema, tmp_path, relay_factory, backend: str, encoding: str,
                  connect: bool = False) -> str:
    """A debezium set over one table with snapshot rows, an insert, a delete, a key update and an
    update, relayed; returns the table's topic. connect: JSON with Connect schemas (the default form)."""
    prefix = f"flink{encoding}{'c' if connect else ''}{cluster}"
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(10,2), ts timestamptz)")
        cur.execute(f"INSERT INTO {table} VALUES (1, 'one', 1.5, '2024-02-29 12:34:56.789012+03'), "
                    "(2, 'two', 2.5, NULL)")
    # pgshovel2's own forms (debezium: {schemas: false}) unless connect: Flink's JSON formats read no
    # Connect Decimal bytes as DECIMAL (Debezium users set decimal.handling.mode=string for them)
    extra = {"debezium": {"schemas": False}} if not connect else {}
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding=encoding, backend=backend,
                       envelope="debezium", topic_prefix=prefix, **extra)
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    relay = relay_factory(SET)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (3, 'thrée ✓', -0.01, now())")
        cur.execute(f"DELETE FROM {table} WHERE id = 2")
        cur.execute(f"UPDATE {table} SET id = 30 WHERE id = 3")
        cur.execute(f"UPDATE {table} SET v = 'ONE', n = n * 2 WHERE id = 1")
    caught_up(stack, cluster, SET)
    assert relay.stop() == 0
    return names.table_topic(prefix, schema, "t")


def check_changelog(db, schema: str, changelog: list[dict], ts_sql: str = TS_TEXT) -> None:
    """The changelog Flink derived is the operations in order, and replays to the table's rows
    (ts_sql: the SQL giving column ts as Flink prints it)."""
    assert [c["kind"] for c in changelog] == ["+I", "+I", "+I", "-D", "-D", "+I", "-U", "+U"]
    state: dict = {}
    for change in changelog:
        row = tuple(change["row"])
        if change["kind"] in ("+I", "+U"):
            assert change["kind"] == "+U" or row[0] not in state
            state[row[0]] = row
        else:
            assert state.pop(row[0]) == row
    with db.cursor() as cur:
        cur.execute(f'SELECT id::text, v, n::text, {ts_sql} FROM "{schema}".t')
        assert state == {r[0]: r for r in cur.fetchall()}


def stopping_offsets(bootstrap: str, topic: str) -> str:
    """Flink's ``scan.bounded.specific-offsets`` just past each partition's last committed message.

    ``latest-offset`` never finishes on a transactional topic with the Kafka connector 3.2
    (FLINK-34470, fixed in later connectors, which Maven Central has no 1.20 build of): the
    end offset is a transaction marker no consumer ever receives.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"stop-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ends, pending = dict.fromkeys(partitions, 0), set(partitions)
        while pending:
            msg = consumer.poll(30)
            assert msg is not None, f"no message from {topic} within 30s"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                pending.discard(msg.partition())
            else:
                ends[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return ";".join(f"partition:{p},offset:{o}" for p, o in sorted(ends.items()))


@needs_pyflink
def test_flink_debezium_json_reads_the_topic(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    topic = relay_changes(stack, cluster, db, schema, tmp_path, relay_factory, backend, "json")
    path = tmp_path / "events.json"  # the format skips tombstones; so does this file
    values = [v for _, v, _ in read_topics(stack.bootstrap, [topic])[topic] if v is not None]
    path.write_bytes(b"".join(v + b"\n" for v in values))
    changelog = flink_changelog(FLINK_COLUMNS, {"connector": "filesystem", "path": str(path), "format": "debezium-json",
                                 "debezium-json.timestamp-format.standard": "ISO-8601"}, [], tmp_path)
    check_changelog(db, schema, changelog)


def avro_source(stack, topic: str) -> dict:
    """The WITH options of a Flink source reading topic with debezium-avro-confluent (Flink's Kafka
    connector, read_committed, bounded just past the last committed message)."""
    return {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": stack.bootstrap,
            "properties.group.id": f"flink-{uuid.uuid4().hex[:8]}", "properties.isolation.level": "read_committed",
            "scan.startup.mode": "earliest-offset", "scan.bounded.mode": "specific-offsets",
            "scan.bounded.specific-offsets": stopping_offsets(stack.bootstrap, topic),
            "format": "debezium-avro-confluent", "debezium-avro-confluent.url": stack.registry}


@needs_pyflink
@pytest.mark.skipif(not AVRO_JARS, reason="Flink's Kafka connector and avro-confluent format jars (scripts/install.sh "
                                          "puts them in .cache/flink-jars, or set FLINK_JARS)")
def test_flink_debezium_avro_confluent_reads_the_topic(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    topic = relay_changes(stack, cluster, db, schema, tmp_path, relay_factory, backend, "avro")
    changelog = flink_changelog(AVRO_COLUMNS, avro_source(stack, topic), AVRO_JARS, tmp_path)
    check_changelog(db, schema, changelog, TS_MICROS)


@needs_pyflink
def test_flink_debezium_json_reads_the_connect_form(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    """The default JSON form (JsonConverter's schema + payload) with ``debezium-json.schema-include``;
    the Decimal column declared as the base64 string Debezium's precise mode writes, as a Flink user
    of Debezium's defaults declares it, and read back here."""
    topic = relay_changes(stack, cluster, db, schema, tmp_path, relay_factory, backend, "json", connect=True)
    path = tmp_path / "events.json"
    values = [v for _, v, _ in read_topics(stack.bootstrap, [topic])[topic] if v is not None]
    assert all(json.loads(v).keys() == {"schema", "payload"} for v in values)
    path.write_bytes(b"".join(v + b"\n" for v in values))
    columns = [*FLINK_COLUMNS[:2], ["n", "STRING"], FLINK_COLUMNS[3]]
    changelog = flink_changelog(columns, {"connector": "filesystem", "path": str(path), "format": "debezium-json",
                                          "debezium-json.schema-include": "true",
                                          "debezium-json.timestamp-format.standard": "ISO-8601"}, [], tmp_path)
    for change in changelog:
        n = change["row"][2]
        change["row"][2] = None if n is None else decimal_text(
            int.from_bytes(base64.b64decode(n), "big", signed=True), 2)
    check_changelog(db, schema, changelog)


@needs_pyflink
@pytest.mark.skipif(not AVRO_JARS, reason="Flink's Kafka connector and avro-confluent format jars (scripts/install.sh "
                                          "puts them in .cache/flink-jars, or set FLINK_JARS)")
def test_flink_debezium_avro_confluent_reads_the_connect_form(stack, cluster, db, schema, tmp_path, relay_factory,
                                                              backend):
    """The default Avro form (Debezium's Connect schemas): the timestamptz column is Debezium's
    ZonedTimestamp string, declared STRING as a Flink user of Debezium's defaults declares it."""
    topic = relay_changes(stack, cluster, db, schema, tmp_path, relay_factory, backend, "avro", connect=True)
    columns = [*AVRO_COLUMNS[:3], ["ts", "STRING"]]
    changelog = flink_changelog(columns, avro_source(stack, topic), AVRO_JARS, tmp_path)
    check_changelog(db, schema, changelog, "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
