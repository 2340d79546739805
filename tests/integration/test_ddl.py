"""DDL on captured tables while the relay runs, and set-version switches in the stream.

Ground truth is the writer itself: one thread, autocommit, each statement
``... RETURNING to_jsonb(t.*)`` records the row exactly as the database had it
when it committed (so with the columns of the layout of that moment). Every
Kafka message is decoded with the schema id it carries and compared with it.
"""

import io
import json
import signal
import statistics
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import replace

import fastavro
import psycopg2
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import names
from pgshovel2.backends import trigger
from pgshovel2.catalog import column_from_row, resolve_table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import TableConfig
from pgshovel2.setrecord import CONSUMER, queue_name
from tests.helpers import RelayProcess, caught_up, pgshovel, until, write_config


class Writer(threading.Thread):
    """Inserts, updates and deletes rows of table (columns id, n) until stopped.

    log: [(op c/u/d, id, row dict after the change or None, commit time s)] in commit order.
    """

    def __init__(self, dsn: str, table: str):
        super().__init__()
        self.dsn, self.table = dsn, table
        self.stop = threading.Event()
        self.log: list[tuple[str, int, dict | None, float]] = []
        self.live: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = psycopg2.connect(self.dsn)
            conn.autocommit = True
            with conn.cursor() as cur:
                next_id = 1
                while not self.stop.is_set():
                    next_id = self._step(cur, next_id)
            conn.close()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _step(self, cur, next_id: int) -> int:
        """One autocommitted change: every 7th a delete, every 3rd an update, else an insert."""
        k = len(self.log)
        if k % 7 == 6 and self.live:
            key = self.live.pop(k % len(self.live))
            cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (key,))
            self.log.append(("d", key, None, time.time()))
        elif k % 3 == 2 and self.live:
            key = self.live[-1]
            cur.execute(f"UPDATE {self.table} t SET n = n + 1 WHERE id = %s RETURNING to_jsonb(t.*)", (key,))
            self.log.append(("u", key, cur.fetchone()[0], time.time()))
        else:
            cur.execute(f"INSERT INTO {self.table} AS t (id, n) VALUES (%s, 0) RETURNING to_jsonb(t.*)",
                        (next_id,))
            self.log.append(("c", next_id, cur.fetchone()[0], time.time()))
            self.live.append(next_id)
            next_id += 1
        return next_id


def read_table_topic(stack, topic: str) -> list[dict]:
    """Every committed message of topic: key, value decoded with its own schema id, headers,
    schema id, Kafka timestamp (ms)."""
    registry = SchemaRegistryClient({"url": stack.registry})
    schemas: dict[int, dict] = {}

    def decode(data: bytes | None) -> tuple[dict | None, int | None]:
        if data is None:
            return None, None
        sid = int.from_bytes(data[1:5], "big")
        if sid not in schemas:
            schemas[sid] = fastavro.parse_schema(json.loads(registry.get_schema(sid).schema_str))
        return fastavro.schemaless_reader(io.BytesIO(data[5:]), schemas[sid]), sid

    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"ddl-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    out = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while True:
            msg = consumer.poll(30)
            assert msg is not None, f"timed out reading {topic}"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            value, sid = decode(msg.value())
            out.append({"key": decode(msg.key())[0], "value": value, "schema_id": sid, "raw": msg.value(),
                        "headers": {k: v.decode() for k, v in msg.headers() or []},
                        "kafka_ms": msg.timestamp()[1]})
    finally:
        consumer.close()


LAYOUTS = {1: {"id", "n", "s"}, 2: {"id", "n", "s", "extra"}, 3: {"id", "n", "s", "extra", "flag"},
           4: {"id", "n", "label", "extra", "flag"}, 5: {"id", "n", "label", "flag"}}


def assert_stream_follows_the_ddl(stack, msgs: list[dict], writer: Writer, topic: str) -> None:
    """After the add/add/rename/drop statements of the DDL tests (LAYOUTS): every row, in commit
    order per key, decoded with its own schema, equals what was written; each message's
    pgshovel.version names the layout it was encoded with, versions only grow; the registry holds
    one value schema per version."""
    expected, got = defaultdict(list), defaultdict(list)
    for op, key, row, _ in writer.log:
        expected[key].append((op, row))
    for m in msgs:
        got[m["key"]["id"]].append((m["headers"]["pgshovel.op"], m["value"]))
    assert len(msgs) == len(writer.log) and got == expected
    versions = [int(m["headers"]["pgshovel.version"]) for m in msgs]
    assert versions == sorted(versions) and set(versions) == set(LAYOUTS)
    for m, v in zip(msgs, versions, strict=True):
        assert m["value"] is None or set(m["value"]) == LAYOUTS[v]
    registry = SchemaRegistryClient({"url": stack.registry})
    assert len(registry.get_versions(f"{topic}-value")) == 5


def set_up(stack, cluster, db, schema, tmp_path, set_name: str, columns: str = "id int PRIMARY KEY, n int, s text"):
    """Table <schema>.t, a set on it, returns (table, topic, queue)."""
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} ({columns})")
    prefix = f"{set_name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    return table, names.table_topic(prefix, schema, "t"), queue_name(cluster, set_name)


def ddl(db, statement: str) -> float:
    """Run statement; returns how long it took (s)."""
    started = time.monotonic()
    with db.cursor() as cur:
        cur.execute(statement)
    return time.monotonic() - started


def test_catalog_and_event_trigger_agree_on_columns(db, schema):
    """catalog.py's column query and the extension's pgshovel2.table_columns() give the same Columns."""
    with db.cursor() as cur:
        cur.execute(f'CREATE DOMAIN "{schema}".d AS numeric(7,3)')
        cur.execute(f'CREATE TYPE "{schema}".e AS ENUM (\'a\')')
        cur.execute(f'CREATE TABLE "{schema}".k (id int PRIMARY KEY, a text[], n numeric(10,2), '
                    f'd "{schema}".d, e "{schema}".e, ts timestamptz NOT NULL, j jsonb, dropme int)')
        cur.execute(f'ALTER TABLE "{schema}".k DROP COLUMN dropme')
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        trigger.ensure_extension(cur)
        table = resolve_table(cur, TableConfig(schema, "k"), "tables[0]", "test")
        cur.execute(f"SELECT pgshovel2.table_columns('\"{schema}\".k'::regclass, NULL)")
        from_sql = tuple(column_from_row(r) for r in cur.fetchone()[0])
    assert from_sql == table.columns


def test_add_drop_rename_while_writing(stack, cluster, db, schema, tmp_path, relay_factory):
    table, topic, _ = set_up(stack, cluster, db, schema, tmp_path, "ddl")
    relay = relay_factory("ddl")
    relay.wait_for("snapshot done")
    writer = Writer(stack.dsn, table)
    writer.start()
    statements = [f"ALTER TABLE {table} ADD COLUMN extra text",
                  f"ALTER TABLE {table} ADD COLUMN flag int NOT NULL DEFAULT 7",
                  f"ALTER TABLE {table} RENAME COLUMN s TO label",
                  f"ALTER TABLE {table} DROP COLUMN extra"]
    ddl_at, ddl_took = [], []
    try:
        time.sleep(1.0)
        for statement in statements:
            ddl_took.append(ddl(db, statement))
            ddl_at.append(time.time())
            time.sleep(1.0)
    finally:
        writer.stop.set()
        writer.join()
    assert writer.error is None, writer.error
    caught_up(stack, cluster, "ddl")
    msgs = read_table_topic(stack, topic)
    assert relay.proc.poll() is None, relay.log()

    assert_stream_follows_the_ddl(stack, msgs, writer, topic)
    registry = SchemaRegistryClient({"url": stack.registry})  # BACKWARD, checked by the registry
    assert registry.get_compatibility(f"{topic}-value") == "BACKWARD"
    assert len(registry.get_versions(f"{topic}-key")) == 1
    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("ddl") == [1, 2, 3, 4, 5]
        changes = [store.get_version("ddl", v).change["statement"] for v in (2, 3, 4, 5)]
    assert changes == statements

    # Rebuilt state, every last value read with the latest schema (defaults, aliases), equals the table.
    latest = fastavro.parse_schema(json.loads(registry.get_latest_version(f"{topic}-value").schema.schema_str))
    state = {}
    for m in msgs:
        state[m["key"]["id"]] = m
    rebuilt = {}
    for key, m in state.items():
        if m["value"] is not None:
            writer_schema = fastavro.parse_schema(json.loads(registry.get_schema(m["schema_id"]).schema_str))
            rebuilt[key] = fastavro.schemaless_reader(io.BytesIO(m["raw"][5:]), writer_schema, latest)
    with db.cursor() as cur:
        cur.execute(f"SELECT id, to_jsonb(t.*) FROM {table} t")
        assert rebuilt == dict(cur.fetchall())

    report_pause(msgs, ddl_at, ddl_took)
    assert relay.stop() == 0


def report_pause(msgs: list[dict], ddl_at: list[float], ddl_took: list[float]) -> None:
    """Print capture-to-Kafka latency of the rows right after each DDL vs steady state."""
    lat = [(int(m["headers"]["pgshovel.ts_ms"]), m["kafka_ms"] - int(m["headers"]["pgshovel.ts_ms"])) for m in msgs]
    near = [ms for ts, ms in lat if any(0 <= ts / 1000 - at < 0.3 for at in ddl_at)]
    steady = [ms for ts, ms in lat if all(abs(ts / 1000 - at) > 0.5 for at in ddl_at)]
    print(f"\nDDL-PAUSE: statements took {[round(t * 1000, 1) for t in ddl_took]} ms; capture->Kafka latency "
          f"steady median {statistics.median(steady):.0f} ms p99 {sorted(steady)[int(len(steady) * 0.99)]} ms "
          f"max {max(steady)} ms; rows within 300 ms after a DDL: median "
          f"{statistics.median(near) if near else 0:.0f} ms max {max(near, default=0)} ms (n={len(near)}, "
          f"steady n={len(steady)})")


@pytest.mark.parametrize("statement, reason", [
    ("ALTER TABLE {t} ALTER COLUMN n TYPE text", "column 'n' changed type from integer to text"),
    ("ALTER TABLE {t} DROP COLUMN id", "key column"),
])
def test_incompatible_change_stops_losing_nothing(stack, cluster, db, schema, tmp_path, relay_factory,
                                                  statement, reason):
    """The relay stops at the change and waits there (for pgshovel set accept-ddl: test_ddl_remedies.py):
    everything before it is in Kafka once, the rest stays in the queue; a relay started after the
    first one stopped waits at the same place and writes nothing twice."""
    table, topic, queue = set_up(stack, cluster, db, schema, tmp_path, "bad")
    relay = relay_factory("bad")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, g, 'before' FROM generate_series(1, 50) g")
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {table} VALUES (51, 51, 'same txn, before the DDL')")
        cur.execute(statement.format(t=table))
        cur.execute("COMMIT")
        cur.execute(f"INSERT INTO {table} (n) SELECT g FROM generate_series(1, 5) g"
                    if "DROP COLUMN id" in statement else
                    f"INSERT INTO {table} SELECT g, g, 'after' FROM generate_series(100, 104) g")
    relay.wait_for("waiting for the operator's decision")
    log = relay.log()
    assert reason in log and statement.format(t=table) in log and f'"{schema}"."t"' in log
    assert "pgshovel set accept-ddl bad" in log and log.count("restarting from the committed position") == 0

    def check() -> None:
        msgs = read_table_topic(stack, topic)
        assert sorted(m["key"]["id"] for m in msgs) == list(range(1, 52))  # everything before, once
        with db.cursor() as cur:  # tick, so pending_events counts every event committed so far
            cur.execute("SELECT pgq.force_tick(%s)", (queue,))
            cur.execute("SELECT pgq.ticker(%s)", (queue,))
            cur.execute("SELECT pending_events FROM pgq.get_consumer_info(%s, %s)", (queue, CONSUMER))
            assert cur.fetchone()[0] >= 7  # row 51, the DDL and the rows after: not acknowledged
    check()
    assert relay.stop() == 0 and relay.proc.returncode == 0  # SIGTERM ends the wait
    again = relay_factory("bad")  # a restart waits at the same place and writes nothing twice
    until(lambda: again.log().count("waiting for the operator's decision") == 2, "the second relay waits", 60)
    assert reason in again.log()
    check()
    assert again.stop() == 0


def test_version_marker_adds_table_and_column(stack, cluster, db, schema, tmp_path, relay_factory):
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, w int)")
        cur.execute(f'CREATE TABLE "{schema}".b (id int PRIMARY KEY, x text)')
    prefix = f"ver{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t", "columns": ["id", "v"]}],
                       topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", "ver", str(cfg))
    relay = relay_factory("ver")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1, 'old', 10)")
    conn = psycopg2.connect(stack.dsn)
    with ClusterStore(stack.zk, cluster) as store, conn, conn.cursor() as cur:
        record, znode = store.get_set("ver")
        config = replace(record.config, tables=(TableConfig(schema, "t"), TableConfig(schema, "b")))
        tables = tuple(resolve_table(cur, TableConfig(schema, n), f"tables[{i}]", "test")
                       for i, n in enumerate(("t", "b")))
        cur.execute(f'DROP TRIGGER "{record.capture.trigger}" ON {table}')
        cur.execute(f'DROP TRIGGER "{record.capture.trigger}_t" ON {table}')
        trigger.install_triggers(cur, record.capture, tables, trigger.column_counts(cur, tables))
        trigger.mark_version(cur, record.capture, 2)
        cur.execute(f"INSERT INTO {table} VALUES (2, 'new', 20)")  # same transaction, after the marker
        store.update_set(record.replace(version=2, config=config, tables=tables), znode)
    conn.close()
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".b VALUES (1, \'b\')')
        cur.execute(f"UPDATE {table} SET v = 'newer' WHERE id = 1")
    caught_up(stack, cluster, "ver")
    t_msgs = read_table_topic(stack, names.table_topic(prefix, schema, "t"))
    got = [(m["value"], m["headers"]["pgshovel.version"]) for m in t_msgs]
    assert got == [({"id": 1, "v": "old"}, "1"), ({"id": 2, "v": "new", "w": 20}, "2"),
                   ({"id": 1, "v": "newer", "w": 10}, "2")]
    b_msgs = read_table_topic(stack, names.table_topic(prefix, schema, "b"))
    assert [(m["value"], m["headers"]["pgshovel.version"]) for m in b_msgs] == [({"id": 1, "x": "b"}, "2")]
    assert relay.stop() == 0
    # A restart resumes in version 2 (from the position), not by replaying the marker.
    relay = relay_factory("ver")
    relay.wait_for("resuming after tick")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (3, 'after restart', 30)")
    caught_up(stack, cluster, "ver")
    last = read_table_topic(stack, names.table_topic(prefix, schema, "t"))[-1]
    assert (last["value"], last["headers"]["pgshovel.version"]) == ({"id": 3, "v": "after restart", "w": 30}, "2")
    assert relay.stop() == 0


def test_restart_after_storing_the_ddl_version_reuses_it(stack, cluster, db, schema, tmp_path, relay_factory):
    """Killed after writing set version 2 to ZooKeeper but before the Kafka commit: the restarted
    relay replays the DDL event, finds version 2 recording the same change and writes no other."""
    table, topic, _ = set_up(stack, cluster, db, schema, tmp_path, "idem")
    dying = RelayProcess(stack, cluster, "idem", log_path=tmp_path / "dying.log",
                         extra_env={"PGSHOVEL2_FAILPOINTS": "after_set_version=1"})
    try:
        dying.wait_for("snapshot done")
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {table} SELECT g, g, 'before' FROM generate_series(1, 10) g")
            cur.execute(f"ALTER TABLE {table} ADD COLUMN c int")
            cur.execute(f"INSERT INTO {table} SELECT g, g, 'after', -g FROM generate_series(11, 20) g")
        assert dying.proc.wait(60) == -9, dying.log()
    finally:
        dying.stop(signal.SIGKILL)
    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("idem") == [1, 2]
    relay = relay_factory("idem")
    caught_up(stack, cluster, "idem")
    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("idem") == [1, 2]
    msgs = read_table_topic(stack, topic)
    got = [(m["key"]["id"], m["value"].get("c"), m["headers"]["pgshovel.version"]) for m in msgs]
    assert got == [(i, None, "1") for i in range(1, 11)] + [(i, -i, "2") for i in range(11, 21)]
    assert relay.stop() == 0
