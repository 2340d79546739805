"""DDL mid-stream and ``set upgrade`` for logical sets, with both decoders (our plugin's layout
records, pgoutput's Relation messages): the trigger backend's tests of test_ddl.py and
test_lifecycle.py, on a logical set.

Ground truth is the writer (test_ddl.Writer: ``RETURNING to_jsonb(t.*)``, the row as committed).
"""

import io
import json
import threading

import fastavro
import psycopg2
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import caught_up, pgshovel, until, write_config
from tests.integration.test_ddl import Writer, assert_stream_follows_the_ddl, ddl, read_table_topic

DECODERS = ["logical", "pgoutput"]  # write_config's backends: our plugin, decoder pgoutput


def set_up(stack, cluster, db, schema, tmp_path, set_name: str, backend: str,
           columns: str = "id int PRIMARY KEY, n int, s text"):
    """Table <schema>.t and a logical set on it; returns (table, topic)."""
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} ({columns})")
    prefix = f"{set_name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend=backend, topic_prefix=prefix)
    out = pgshovel(stack, cluster, "set", "create", set_name, str(cfg)).stdout
    assert ("pgoutput" in out) == (backend == "pgoutput"), out
    return table, names.table_topic(prefix, schema, "t")


@pytest.mark.parametrize("backend", DECODERS)
def test_add_drop_rename_while_writing(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    table, topic = set_up(stack, cluster, db, schema, tmp_path, "lddl", backend)
    relay = relay_factory("lddl")
    relay.wait_for("snapshot done")
    writer = Writer(stack.dsn, table)
    writer.start()
    statements = [f"ALTER TABLE {table} ADD COLUMN extra text",
                  f"ALTER TABLE {table} ADD COLUMN flag int NOT NULL DEFAULT 7",
                  f"ALTER TABLE {table} RENAME COLUMN s TO label",
                  f"ALTER TABLE {table} DROP COLUMN extra"]
    try:
        writer.stop.wait(1.0)
        for statement in statements:
            ddl(db, statement)
            writer.stop.wait(1.0)
    finally:
        writer.stop.set()
        writer.join()
    assert writer.error is None, writer.error
    caught_up(stack, cluster, "lddl")
    msgs = read_table_topic(stack, topic)
    assert relay.proc.poll() is None, relay.log()

    assert_stream_follows_the_ddl(stack, msgs, writer, topic)
    registry = SchemaRegistryClient({"url": stack.registry})
    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("lddl") == [1, 2, 3, 4, 5]
        assert {store.get_version("lddl", v).change["table"] for v in (2, 3, 4, 5)} == {f'"{schema}"."t"'}

    latest = fastavro.parse_schema(json.loads(registry.get_latest_version(f"{topic}-value").schema.schema_str))
    state = {m["key"]["id"]: m for m in msgs}
    rebuilt = {}
    for key, m in state.items():
        if m["value"] is not None:
            writer_schema = fastavro.parse_schema(json.loads(registry.get_schema(m["schema_id"]).schema_str))
            rebuilt[key] = fastavro.schemaless_reader(io.BytesIO(m["raw"][5:]), writer_schema, latest)
    with db.cursor() as cur:
        cur.execute(f"SELECT id, to_jsonb(t.*) FROM {table} t")
        assert rebuilt == dict(cur.fetchall())
    assert relay.stop() == 0


@pytest.mark.parametrize("backend", DECODERS)
@pytest.mark.parametrize("statement, reason", [
    ("ALTER TABLE {t} ALTER COLUMN n TYPE text", "column 'n' changed type from integer to text"),
    ("ALTER TABLE {t} DROP COLUMN id", "key column"),
])
def test_incompatible_change_stops_losing_nothing(stack, cluster, db, schema, tmp_path, relay_factory,
                                                  statement, reason, backend):
    """The relay stops at the change and waits (test_ddl.py's test for logical sets); a relay started
    after the first one stopped waits at the same place and writes nothing twice."""
    table, topic = set_up(stack, cluster, db, schema, tmp_path, "lbad", backend)
    relay = relay_factory("lbad")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, g, 'before' FROM generate_series(1, 50) g")
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {table} VALUES (51, 51, 'same txn, before the DDL')")
        cur.execute(statement.format(t=table))
        cur.execute(f"INSERT INTO {table} (n) VALUES (52)" if "DROP COLUMN id" in statement else
                    f"INSERT INTO {table} VALUES (52, 52, 'same txn, after the DDL')")
        cur.execute("COMMIT")
        cur.execute(f"INSERT INTO {table} (n) SELECT g FROM generate_series(1, 5) g"
                    if "DROP COLUMN id" in statement else
                    f"INSERT INTO {table} SELECT g, g, 'after' FROM generate_series(100, 104) g")
    relay.wait_for("waiting for the operator's decision")
    log = relay.log()
    assert reason in log and f'"{schema}"."t"' in log and "ALTER TABLE" in log, log
    assert "pgshovel set accept-ddl lbad" in log and log.count("restarting from the committed position") == 0

    def check() -> None:
        msgs = read_table_topic(stack, topic)
        assert sorted(m["key"]["id"] for m in msgs) == list(range(1, 52))  # everything before, once

    check()
    assert relay.stop() == 0
    again = relay_factory("lbad")  # a restart waits at the same place and writes nothing twice
    until(lambda: again.log().count("waiting for the operator's decision") == 2, "the second relay waits", 60)
    assert reason in again.log()
    check()
    assert again.stop() == 0


class MultiWriter(threading.Thread):
    """Inserts rows into each of tables in turn (autocommit), until stopped; ids per table."""

    def __init__(self, dsn: str, tables: list[str]):
        super().__init__()
        self.dsn, self.tables = dsn, tables
        self.stop = threading.Event()
        self.ids: dict[str, int] = {t: 0 for t in tables}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = psycopg2.connect(self.dsn)
            conn.autocommit = True
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    for table in self.tables:
                        cur.execute(f"INSERT INTO {table} (id, x) VALUES (%s, 'w')", (self.ids[table] + 1,))
                        self.ids[table] += 1
            conn.close()
        except BaseException as exc:
            self.error = exc


@pytest.mark.parametrize("backend", DECODERS)
def test_upgrade_adds_table_and_column_removes_table_under_writers(stack, cluster, db, schema, tmp_path,
                                                                   relay_factory, backend):
    t, r, b = (f'"{schema}".{n}' for n in ("t", "r", "b"))
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, x text, w int DEFAULT 5)")
        cur.execute(f"CREATE TABLE {r} (id int PRIMARY KEY, x text)")
        cur.execute(f"CREATE TABLE {b} (id int PRIMARY KEY, x text)")
        cur.execute(f"INSERT INTO {b} VALUES (0, 'existing')")
    prefix = f"lup{cluster}"
    v1 = [{"schema": schema, "name": "t", "columns": ["id", "x"]}, {"schema": schema, "name": "r"}]
    v2 = [{"schema": schema, "name": "t"}, {"schema": schema, "name": "b"}]
    pgshovel(stack, cluster, "set", "create", "lup",
             str(write_config(tmp_path, stack, v1, backend=backend, topic_prefix=prefix)))
    cfg = write_config(tmp_path, stack, v2, backend=backend, topic_prefix=prefix)
    relay = relay_factory("lup")
    relay.wait_for("snapshot done")
    writer = MultiWriter(stack.dsn, [t, r, b])
    writer.start()
    try:
        writer.stop.wait(1.0)
        out = pgshovel(stack, cluster, "set", "upgrade", "lup", str(cfg), "--no-snapshot").stdout
        writer.stop.wait(1.0)
    finally:
        writer.stop.set()
        writer.join()
    assert writer.error is None, writer.error
    assert "added table" in out and "requested" not in out, out  # the online snapshot: test_online_snapshot
    caught_up(stack, cluster, "lup")

    def read(name: str) -> list[tuple[int, dict | None, int]]:
        msgs = read_table_topic(stack, names.table_topic(prefix, schema, name))
        return [(m["key"]["id"], m["value"], int(m["headers"]["pgshovel.version"])) for m in msgs]

    t_msgs, r_msgs, b_msgs = read("t"), read("r"), read("b")
    assert [k for k, _, _ in t_msgs] == list(range(1, writer.ids[t] + 1))  # every row of t, once, in order
    versions = [v for _, _, v in t_msgs]
    assert versions == sorted(versions) and set(versions) == {1, 2}
    for _, value, v in t_msgs:
        assert set(value) == ({"id", "x"} if v == 1 else {"id", "x", "w"})
    # r: a prefix of its rows (up to the switch), all in version 1; b: the rest of its rows after it, version 2
    r_ids, b_ids = [k for k, _, _ in r_msgs], [k for k, _, _ in b_msgs]
    assert r_ids == list(range(1, len(r_ids) + 1)) and {v for _, _, v in r_msgs} == {1}
    assert b_ids and b_ids == list(range(b_ids[0], writer.ids[b] + 1)) and {v for _, _, v in b_msgs} == {2}
    assert 0 not in b_ids  # existing rows are not copied (--no-snapshot)
    # one cut: the writer inserts t, r, b in turn; rows of round k are before or after the switch together
    switch_t = next(k for k, _, v in t_msgs if v == 2)
    assert len(r_ids) in (switch_t - 1, switch_t - 2) and b_ids[0] in (len(r_ids) + 1, len(r_ids)), \
        (switch_t, len(r_ids), b_ids[0])
    assert relay.proc.poll() is None, relay.log()
    assert relay.stop() == 0


@pytest.mark.parametrize("backend", ["trigger", *DECODERS])
def test_rows_before_add_column_read_as_its_default(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    """ADD COLUMN with a DEFAULT: rows that existed before hold the default in PostgreSQL without
    any change being written; read with the newest value schema they hold it from Kafka too
    (nullable text and NOT NULL int), or read as null with a warning in the relay's log where
    Avro cannot carry the default (timestamptz)."""
    table, topic = set_up(stack, cluster, db, schema, tmp_path, "ldef", backend)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, g, 'old' FROM generate_series(1, 3) g")
    relay = relay_factory("ldef")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (4, 4, 'streamed before the DDL')")
        cur.execute(f"ALTER TABLE {table} ADD COLUMN note text DEFAULT 'n/a', ADD COLUMN flag int NOT NULL DEFAULT 7")
        cur.execute(f"ALTER TABLE {table} ADD COLUMN at timestamptz DEFAULT '2020-01-02 03:04:05+00'")
        cur.execute(f"INSERT INTO {table} VALUES (5, 5, 'after', NULL, 8)")
        cur.execute(f"UPDATE {table} SET n = 10 WHERE id = 1")
    caught_up(stack, cluster, "ldef")
    msgs = read_table_topic(stack, topic)
    assert relay.proc.poll() is None, relay.log()
    registry = SchemaRegistryClient({"url": stack.registry})
    latest = fastavro.parse_schema(json.loads(registry.get_latest_version(f"{topic}-value").schema.schema_str))
    rebuilt = {}
    for m in msgs:
        writer_schema = fastavro.parse_schema(json.loads(registry.get_schema(m["schema_id"]).schema_str))
        row = fastavro.schemaless_reader(io.BytesIO(m["raw"][5:]), writer_schema, latest)
        rebuilt[row["id"]] = (row["n"], row["note"], row["flag"], row["at"])
    with db.cursor() as cur:
        cur.execute(f"SELECT id, n, note, flag FROM {table}")
        assert {i: r[:3] for i, r in rebuilt.items()} == {r[0]: r[1:] for r in cur.fetchall()}
    assert rebuilt[2][1] == "n/a" and rebuilt[5][1] is None and rebuilt[2][2] == 7
    assert rebuilt[2][3] is None and rebuilt[1][3] is not None  # at: not carried for the older rows...
    assert "column 'at' added with DEFAULT" in relay.log()  # ...and said so
    assert relay.stop() == 0
