"""No DDL kills a set (issue #66): widenings go on, on every capture path (trigger with C and
PL/pgSQL capture, logical with our plugin and with pgoutput); a change that cannot be compatible
stops the set at the change until ``pgshovel set accept-ddl`` (both modes), losing and
duplicating nothing, the other tables going on after the decision.

Ground truth: the table's rows in PostgreSQL, compared with the state rebuilt from Kafka, every
message decoded with the schema id it carries (old and new schemas alike).
"""

import signal
import time

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2.cluster import ClusterStore
from tests.helpers import caught_up, pgshovel
from tests.integration.ddl_paths import (
    PATHS,
    assert_same,
    make_set,
    rebuild,
    source_rows,
    txn_records,
    wait_stopped,
)

WIDE = ("id int PRIMARY KEY, n int NOT NULL, amount numeric(12,2), f real, s varchar(10), c char(3), "
        "small smallint")
WIDENINGS = ["ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
             "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,2)",
             "ALTER TABLE {t} ALTER COLUMN f TYPE double precision",
             "ALTER TABLE {t} ALTER COLUMN s TYPE text",
             "ALTER TABLE {t} ALTER COLUMN c TYPE varchar(20)",
             "ALTER TABLE {t} ALTER COLUMN small TYPE bigint",
             "ALTER TABLE {t} ALTER COLUMN id TYPE bigint"]


@pytest.mark.parametrize("path", PATHS)
def test_widenings_go_on_and_keys_keep_their_bytes(stack, cluster, db, schema, tmp_path, relay_factory, path):
    """int -> bigint (also of the key), numeric(12,2) -> (14,2), real -> double precision,
    varchar(10) -> text, char(3) -> varchar(20), smallint -> bigint: the relay goes on without a
    stop; values written before and after decode with their own schemas and rebuild the table
    exactly; the key keeps its registered schema, so a row's key bytes are the same before and
    after; the value subject stays BACKWARD in the registry, which accepted each new version."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "wide", path,
                      {"t": WIDE, "o": "id int PRIMARY KEY, v text"})
    t, o = f'"{schema}".t', f'"{schema}".o'
    relay = relay_factory("wide")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, g, g + 0.25, g + 0.5, 'v' || g, 'c' || g % 10, g FROM "
                    "generate_series(1, 20) g")
        for statement in WIDENINGS:
            cur.execute(statement.format(t=t))
            cur.execute(f"INSERT INTO {o} VALUES ((SELECT count(*) FROM {o}) + 1, %s)", (statement,))
        cur.execute(f"INSERT INTO {t} VALUES (21, 5000000000, 123456789012.34, 1.0000000001, repeat('x', 40), "
                    "'wider than 3', 9000000000)")
        cur.execute(f"UPDATE {t} SET n = n + 4000000000, amount = amount * 1000 WHERE id <= 5")
        cur.execute(f"DELETE FROM {t} WHERE id = 6")
    caught_up(stack, cluster, "wide")
    wait_snapshot_done(stack, cluster, "wide", relay)  # char(3) -> varchar: PostgreSQL rewrote the values
    assert relay.proc.poll() is None, relay.log()
    assert "waiting for the operator" not in relay.log()

    state, msgs = rebuild(stack, [topics["t"]])
    assert_same(state, source_rows(db, t))
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    keys_of_1 = {raw for topic, k, v, h, raw in msgs if k == {"id": 1}}
    assert len(keys_of_1) == 1, keys_of_1  # snapshot row, insert and update: one key, same bytes
    registry = SchemaRegistryClient({"url": stack.registry})
    assert registry.get_compatibility(f"{topics['t']}-value") == "BACKWARD"
    assert len(registry.get_versions(f"{topics['t']}-key")) == 1
    assert len(registry.get_versions(f"{topics['t']}-value")) >= 2
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("wide")
    table = record.table(f'"{schema}"."t"')
    assert [c.pg_type for c in table.key_layout] == ["integer"]
    assert {c.name: c.pg_type for c in table.columns}["amount"] == "numeric(14,2)"
    assert relay.stop() == 0


@pytest.mark.parametrize("path", PATHS)
def test_incompatible_change_waits_then_accept_registers_the_schema(stack, cluster, db, schema, tmp_path,
                                                                      relay_factory, path):
    """numeric(12,2) -> numeric(12,3) (the scale: other decimal bytes) stops the set at the change:
    the relay stays up and waits, set status says where and what to run, a set upgrade is refused
    pointing at accept-ddl, the other table's later rows wait too; ``accept-ddl`` (default)
    registers the new value schema (compatibility NONE for it, then BACKWARD again) and the set
    goes on at the change, a SCHEMA_CHANGED record marking the place; nothing lost or doubled."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "acc", path,
                      {"t": "id int PRIMARY KEY, amount numeric(12,2)", "o": "id int PRIMARY KEY, v text"})
    t, o = f'"{schema}".t', f'"{schema}".o'
    relay = relay_factory("acc")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, g + 0.25 FROM generate_series(1, 10) g")
        cur.execute(f"INSERT INTO {o} SELECT g, 'before' FROM generate_series(1, 10) g")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(12,3)")
        cur.execute(f"INSERT INTO {t} VALUES (11, 11.125)")
        cur.execute(f"INSERT INTO {o} SELECT g, 'after' FROM generate_series(11, 20) g")
    stop = wait_stopped(stack, cluster, "acc", relay)
    assert stop["table"] == f'"{schema}"."t"' and "amount" in stop["reason"] and not stop["key_change"], stop
    status = pgshovel(stack, cluster, "set", "status", "acc").stdout
    assert "STOPPED AT DDL" in status and f"pgshovel set accept-ddl acc {schema}.t" in status, status
    cfg = tmp_path / "upgrade.yaml"
    cfg.write_text("")
    refused = pgshovel(stack, cluster, "set", "upgrade", "acc", str(cfg), check=False)
    assert refused.returncode != 0 and "accept-ddl" in refused.stderr, refused.stderr
    other, _ = rebuild(stack, [topics["o"]])
    assert sorted(k[0][1] for k in other) == list(range(1, 11))  # the set waits: o's later rows too
    assert relay.proc.poll() is None

    out = pgshovel(stack, cluster, "set", "accept-ddl", "acc", f"{schema}.t", "--reason", "test").stdout
    assert "SCHEMA_CHANGED" in out, out
    caught_up(stack, cluster, "acc")
    assert relay.proc.poll() is None, relay.log()
    assert_same(rebuild(stack, [topics["t"]])[0], source_rows(db, t))
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    marks = [r for r in txn_records(stack, f"acc{cluster}.transactions") if r["type"] == "SCHEMA_CHANGED"]
    assert [(m["table"], m["position"]) for m in marks] == [(topics["t"], stop["position"])], marks
    registry = SchemaRegistryClient({"url": stack.registry})
    assert registry.get_compatibility(f"{topics['t']}-value") == "BACKWARD"
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("acc")
        assert store.get_relay_record("acc", "ddl_stop") is None
    assert record.change["accepted"]["mode"] == "schema" and record.change["accepted"]["reason"] == "test"
    assert relay.stop() == 0


def test_accept_registers_a_schema_the_registry_refuses_as_incompatible(stack, cluster, db, schema, tmp_path,
                                                                          relay_factory):
    """integer -> text on a value column (no Avro promotion reads an int as a string, so the registry's
    BACKWARD rule refuses the new schema): ``accept-ddl`` still registers it -- on Apicurio too, whose
    Confluent API takes NONE as "no rule of the subject" and applies its global BACKWARD rule -- and
    the set goes on at the change with every row. The registry, not the capture, is what this is about:
    one path."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "inc", PATHS[0], {"t": "id int PRIMARY KEY, n int"})
    t = f'"{schema}".t'
    relay = relay_factory("inc")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, g FROM generate_series(1, 5) g")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN n TYPE text")
        cur.execute(f"INSERT INTO {t} VALUES (6, 'six')")
    stop = wait_stopped(stack, cluster, "inc", relay)
    assert "'n'" in stop["reason"] and not stop["key_change"], stop
    pgshovel(stack, cluster, "set", "accept-ddl", "inc", f"{schema}.t")
    caught_up(stack, cluster, "inc")
    assert relay.proc.poll() is None, relay.log()
    assert_same(rebuild(stack, [topics["t"]])[0], source_rows(db, t))
    assert SchemaRegistryClient({"url": stack.registry}).get_compatibility(f"{topics['t']}-value") == "BACKWARD"
    assert relay.stop() == 0


@pytest.mark.parametrize("path", PATHS)
def test_key_change_needs_a_new_topic_which_a_snapshot_fills(stack, cluster, db, schema, tmp_path, relay_factory,
                                                             path):
    """A key column's type change to another Avro type: accept-ddl without --new-topic is refused
    (every key's bytes would change); with it the table goes on in topic generation 2, announced by
    TOPIC_CHANGED at the change, and an online snapshot fills the new topic: its readers have every
    row. The relay restarted while it waits applies the decision as well."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "key", path,
                      {"t": "id int PRIMARY KEY, v text", "o": "id int PRIMARY KEY, v text"})
    t, o = f'"{schema}".t', f'"{schema}".o'
    relay = relay_factory("key")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'before' FROM generate_series(1, 10) g")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN id TYPE text")
        cur.execute(f"UPDATE {t} SET v = 'after' WHERE id IN ('2', '3')")
        cur.execute(f"INSERT INTO {t} VALUES ('x1', 'new'), ('x2', 'new')")
        cur.execute(f"DELETE FROM {t} WHERE id = '4'")
        cur.execute(f"INSERT INTO {o} SELECT g, 'after' FROM generate_series(1, 5) g")
    stop = wait_stopped(stack, cluster, "key", relay)
    assert stop["key_change"], stop
    refused = pgshovel(stack, cluster, "set", "accept-ddl", "key", f"{schema}.t", check=False)
    assert refused.returncode != 0 and "--new-topic" in refused.stderr, refused.stderr
    assert relay.stop(signal.SIGTERM) == 0  # a stop while it waits; the next relay waits there again
    relay = relay_factory("key")
    relay.wait_for("waiting for the operator's decision")
    pgshovel(stack, cluster, "set", "accept-ddl", "key", f"{schema}.t", "--new-topic")
    g2 = topics["t"] + ".g2"
    relay.wait_for("online snapshot")
    caught_up(stack, cluster, "key")
    wait_snapshot_done(stack, cluster, "key", relay)
    new_state, new_msgs = rebuild(stack, [g2])
    assert {k[0][1] for k in new_state} == {str(i) for i in range(1, 11) if i != 4} | {"x1", "x2"}
    assert_same(new_state, source_rows(db, t))
    old_state, _ = rebuild(stack, [topics["t"]])
    assert sorted(k[0][1] for k in old_state) == list(range(1, 11))  # the old topic ends at the change
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    marks = [r for r in txn_records(stack, f"key{cluster}.transactions") if r["type"] == "TOPIC_CHANGED"]
    assert [(m["table"], m["position"], m["data_collections"]) for m in marks] == [
        (topics["t"], stop["position"], [{"data_collection": g2, "event_count": 0}])], marks
    assert relay.stop() == 0


def wait_snapshot_done(stack, cluster: str, set_name: str, relay, timeout: float = 60) -> None:
    """Wait until the set's online snapshot request is done, then until the relay caught up."""
    deadline = time.monotonic() + timeout
    with ClusterStore(stack.zk, cluster) as store:
        while (store.get_snapshot_request(set_name)[0] or {}).get("state") != "done":
            assert relay.proc.poll() is None and time.monotonic() < deadline, relay.log()
            time.sleep(0.2)
    caught_up(stack, cluster, set_name)


@pytest.mark.parametrize("path", PATHS)
def test_rename_table_and_columns_go_on_in_the_same_topic(stack, cluster, db, schema, tmp_path, relay_factory,
                                                           path):
    """RENAME TABLE (and SET SCHEMA), RENAME COLUMN of the key and of another column: the relay goes
    on; the table keeps its topic and its key schema (key bytes unchanged), the set version records
    where the table is now (also for a table renamed with no change after it: the relay notices),
    and what reads the table by name (an online snapshot, set verify) finds it there."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "ren", path,
                      {"t": "id int PRIMARY KEY, v text", "q": "id int PRIMARY KEY, v text"})
    t, q = f'"{schema}".t', f'"{schema}".q'
    relay = relay_factory("ren")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'before' FROM generate_series(1, 10) g")
        cur.execute(f"INSERT INTO {q} SELECT g, 'q' FROM generate_series(1, 3) g")
        cur.execute(f"ALTER TABLE {t} RENAME TO t2")
        cur.execute(f'UPDATE "{schema}".t2 SET v = \'renamed\' WHERE id <= 3')
        cur.execute(f'ALTER TABLE "{schema}".t2 RENAME COLUMN id TO ident')
        cur.execute(f'ALTER TABLE "{schema}".t2 RENAME COLUMN v TO w')
        cur.execute(f'INSERT INTO "{schema}".t2 VALUES (11, \'after\')')
        cur.execute(f'DELETE FROM "{schema}".t2 WHERE ident = 4')
        cur.execute(f"ALTER TABLE {q} RENAME TO q2")  # no change of it after: the relay notices by itself
    with ClusterStore(stack.zk, cluster) as store:
        deadline = time.monotonic() + 60
        while store.get_set("ren")[0].table(f'"{schema}"."q"').renamed is None:
            assert relay.proc.poll() is None and time.monotonic() < deadline, relay.log()
            time.sleep(0.2)
    caught_up(stack, cluster, "ren")
    assert relay.proc.poll() is None, relay.log()
    assert "waiting for the operator" not in relay.log()
    state, msgs = rebuild(stack, [topics["t"]])
    renamed = {((("ident", k[0][1]),)): {{"id": "ident", "v": "w"}.get(c, c): v for c, v in row.items()}
               for k, row in state.items()}
    assert_same(renamed, source_rows(db, f'"{schema}".t2', key="ident"))
    assert len({raw for topic, k, v, h, raw in msgs if k == {"id": 2}}) == 1  # one key, the same bytes
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("ren")
    assert record.table(f'"{schema}"."t"').renamed == (schema, "t2")
    assert record.table(f'"{schema}"."q"').renamed == (schema, "q2")
    pgshovel(stack, cluster, "set", "snapshot", "ren", "--table", f"{schema}.t")
    wait_snapshot_done(stack, cluster, "ren", relay)
    verify = pgshovel(stack, cluster, "set", "verify", "ren", "--bootstrap-servers", stack.bootstrap)
    assert verify.stdout.count(": ok") == 2, verify.stdout
    assert relay.stop() == 0
