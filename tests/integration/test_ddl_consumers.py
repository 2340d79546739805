"""Consumers shipped with pgshovel2 through a set's DDL (issue #66): ``pgshovel replicate`` follows
widenings (of the key too), a column renamed, an incompatible change an operator accepted, and a
dropped table (no longer applied to, its target rows kept and said so); a JSON set goes on through
the same widenings with the same key bytes."""

import subprocess

import psycopg2
import pytest

from tests.helpers import BIN, caught_up, cli_env, pgshovel
from tests.integration.ddl_paths import assert_same, make_set, rebuild, source_rows, wait_stopped
from tests.integration.test_ddl_drop import wait_ended


def test_replicate_follows_widenings_an_accepted_change_and_a_drop(stack, cluster, db, schema, tmp_path,
                                                                   relay_factory, target):
    make_set(stack, cluster, db, schema, tmp_path, "repd", "logical",
             {"t": "id int PRIMARY KEY, n int, amount numeric(12,2), v text", "o": "id int PRIMARY KEY, v text"})
    t, o = f'"{schema}".t', f'"{schema}".o'
    relay = relay_factory("repd")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, g, g + 0.25, 'x' FROM generate_series(1, 10) g")
        cur.execute(f"INSERT INTO {o} SELECT g, 'o' FROM generate_series(1, 5) g")
        for statement in ("ALTER TABLE {t} ALTER COLUMN id TYPE bigint", "ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
                          "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,2)",
                          "ALTER TABLE {t} RENAME COLUMN v TO w"):
            cur.execute(statement.format(t=t))
        cur.execute(f"INSERT INTO {t} VALUES (11, 6000000000, 12345678901.5, 'wide')")
        cur.execute(f"UPDATE {t} SET n = n + 5000000000 WHERE id <= 3")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,3)")
        cur.execute(f"INSERT INTO {t} VALUES (12, 12, 12.125, 'scale 3')")
    wait_stopped(stack, cluster, "repd", relay)
    pgshovel(stack, cluster, "set", "accept-ddl", "repd", f"{schema}.t")
    caught_up(stack, cluster, "repd")
    replicate = [str(BIN / "pgshovel"), "replicate", "repd", "--target", target.dsn, "--until-caught-up"]
    done = subprocess.run([*replicate, "--bootstrap", "kafka"], env=cli_env(stack, cluster), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with db.cursor() as cur:
        kept = source_rows(db, o)
        cur.execute(f"DROP TABLE {o}")
        cur.execute(f"UPDATE {t} SET w = 'after the drop' WHERE id = 12")
    wait_ended(stack, cluster, "repd", f'"{schema}"."o"', relay)
    caught_up(stack, cluster, "repd")
    done = subprocess.run(replicate, env=cli_env(stack, cluster), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "replicate no longer applies to it" in done.stderr, done.stderr
    tconn = target.connect()
    try:
        assert source_rows(tconn, t) == source_rows(db, t)
        assert source_rows(tconn, o) == kept  # the dropped table's target rows stay as they were
        with tconn.cursor() as cur:
            cur.execute(f"SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '{t}'::regclass "
                        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")
            assert [r[0] for r in cur.fetchall()] == ["bigint", "bigint", "numeric(14,3)", "text"]
    finally:
        tconn.close()
    target.query("CREATE DATABASE late")  # a target bootstrapped from Kafka after the drop: no table o ever
    late = target.dsn.replace("dbname=pgshovel", "dbname=late")
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", "repd", "--target", late, "--until-caught-up",
                           "--bootstrap", "kafka"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lconn = psycopg2.connect(late)
    try:
        assert source_rows(lconn, t) == source_rows(db, t)
    finally:
        lconn.close()
    assert relay.stop() == 0


@pytest.mark.parametrize("path", ["c", "pgoutput"])
def test_json_set_goes_on_through_widenings(stack, cluster, db, schema, tmp_path, relay_factory, path):
    """JSON: no registry, the same widenings go on; a key's bytes stay the same (a JSON number)."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "jwide", path,
                      {"t": "id int PRIMARY KEY, n int, amount numeric(12,2), f real, s varchar(5)"},
                      encoding="json")
    t = f'"{schema}".t'
    relay = relay_factory("jwide")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, g, g + 0.25, g + 0.5, 'v' || g FROM generate_series(1, 5) g")
        for statement in ("ALTER TABLE {t} ALTER COLUMN id TYPE bigint", "ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
                          "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(20,2)",
                          "ALTER TABLE {t} ALTER COLUMN f TYPE double precision",
                          "ALTER TABLE {t} ALTER COLUMN s TYPE text", "ALTER TABLE {t} RENAME COLUMN id TO ident"):
            cur.execute(statement.format(t=t))
        cur.execute(f"INSERT INTO {t} VALUES (9000000000, 7000000000, 123456789012345678.25, 0.1, repeat('x', 50))")
        cur.execute(f"UPDATE {t} SET n = 8000000000 WHERE ident = 1")
    caught_up(stack, cluster, "jwide")
    assert relay.proc.poll() is None and "waiting for the operator" not in relay.log(), relay.log()
    state, msgs = rebuild(stack, [topics["t"]])
    rows = {(("ident", k[0][1]),): {"ident" if c == "id" else c: v for c, v in row.items()} for k, row in state.items()}
    assert_same(rows, source_rows(db, t, key="ident"))
    assert len({raw for _, k, _, _, raw in msgs if k == {"id": 1}}) == 1  # the key field keeps its name
    assert relay.stop() == 0


def test_upgrade_keeps_a_renamed_tables_identity_and_kept_key(stack, cluster, db, schema, tmp_path, relay_factory):
    """set upgrade after the key was widened and the table renamed: the config names the table by its
    name now; the upgrade keeps its identity (topic, tag), its kept key layout (key bytes) and adds
    another table; the relay goes on."""
    from pgshovel2.cluster import ClusterStore
    from tests.helpers import write_config

    topics = make_set(stack, cluster, db, schema, tmp_path, "upk", "c", {"t": "id int PRIMARY KEY, v text"})
    t = f'"{schema}".t'
    relay = relay_factory("upk")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 5) g")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN id TYPE bigint")
        cur.execute(f"ALTER TABLE {t} RENAME TO t2")
        cur.execute(f'CREATE TABLE "{schema}".o (id int PRIMARY KEY, v text)')
    caught_up(stack, cluster, "upk")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t2"}, {"schema": schema, "name": "o"}],
                       topic_prefix=f"upk{cluster}", capture="c")
    out = pgshovel(stack, cluster, "set", "upgrade", "upk", str(cfg)).stdout
    assert "added table" in out and "t2" not in out.replace(f'"{schema}"."o"', ""), out
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".t2 SET v = \'after the upgrade\' WHERE id = 1')
        cur.execute(f'INSERT INTO "{schema}".o VALUES (1, \'o\')')
    caught_up(stack, cluster, "upk")
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("upk")
    table = record.table(f'"{schema}"."t"')
    assert table.renamed == (schema, "t2") and [c.pg_type for c in table.key_layout] == ["integer"]
    state, msgs = rebuild(stack, [topics["t"]])
    assert_same(state, source_rows(db, f'"{schema}".t2'))
    assert len({raw for _, k, _, _, raw in msgs if k == {"id": 1}}) == 1
    assert relay.proc.poll() is None, relay.log()
    assert relay.stop() == 0
