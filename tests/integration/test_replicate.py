"""``pgshovel replicate``: a target PostgreSQL kept equal to a set under a pgbench load,
with the replicate process SIGKILLed mid-stream again and again; composite keys,
primary-key updates, deletes, TRUNCATE and ALTER TABLE (add, rename, drop column).

"Nothing applied twice" is checked on the target itself: an ALWAYS trigger (it
fires even under session_replication_role = replica) counts every row written
into the insert-only ledger table; a re-applied insert would show as a second
insert or as an update."""

import random
import signal
import subprocess
import time

import pytest

from tests.chaos import Load
from tests.helpers import BIN, caught_up, cli_env, pgshovel, write_config

AUDIT = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE {s}.ledger (id bigint PRIMARY KEY, account bigint, amount int);
CREATE TABLE public.ledger_audit (id bigint, op text);
CREATE FUNCTION public.ledger_audit() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.ledger_audit VALUES (NEW.id, TG_OP); RETURN NEW; END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE ON {s}.ledger FOR EACH ROW EXECUTE FUNCTION public.ledger_audit();
ALTER TABLE {s}.ledger ENABLE ALWAYS TRIGGER audit;
"""


def make_set(stack, cluster, db, schema, tmp_path, name="rep"):
    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {s}.accounts (id bigint PRIMARY KEY, balance int, note text)")
        cur.execute(f"CREATE TABLE {s}.ledger (id bigserial PRIMARY KEY, account bigint, amount int)")
        cur.execute(f"CREATE TABLE {s}.tags (a int, b int, v text, PRIMARY KEY (a, b))")
        cur.execute(f"CREATE SEQUENCE {s}.moved START 1000000")
        cur.execute(f"INSERT INTO {s}.accounts SELECT g, g, 'seed' FROM generate_series(1, 300) g")
        cur.execute(f"INSERT INTO {s}.tags SELECT g % 40, g / 40, 'seed' FROM generate_series(1, 400) g")
    tables = [{"schema": schema, "name": n} for n in ("accounts", "ledger", "tags")]
    cfg = write_config(tmp_path, stack, tables, topic_prefix=f"{name}{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    return name


def start_replicate(stack, cluster, set_name, dsn, log, *args):
    return subprocess.Popen([str(BIN / "pgshovel"), "replicate", set_name, "--target", dsn, *args],
                            env=cli_env(stack, cluster), stdout=log, stderr=subprocess.STDOUT)


def table_rows(dsn_conn, schema, table, order):
    with dsn_conn.cursor() as cur:
        cur.execute(f'SELECT * FROM "{schema}".{table} ORDER BY {order}')
        return cur.fetchall()


def assert_equal(db, tconn, schema):
    for table, order in (("accounts", "id"), ("ledger", "id"), ("tags", "a, b")):
        src, dst = table_rows(db, schema, table, order), table_rows(tconn, schema, table, order)
        assert len(src) == len(dst), f"{table}: {len(src)} rows in the source, {len(dst)} in the target"
        diff = next(((a, b) for a, b in zip(src, dst, strict=True) if a != b), None)
        assert diff is None, f"{table}: first difference (source, target) {diff}"


def test_replicate_survives_kill9_under_load(stack, cluster, db, schema, relay_factory, tmp_path, target):
    set_name = make_set(stack, cluster, db, schema, tmp_path)
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    tconn = target.connect()
    with tconn.cursor() as cur:
        cur.execute(AUDIT.format(s=f'"{schema}"'))
    load = Load(stack, f'"{schema}"', tmp_path, rate=100)
    load.start()
    rnd, kills, log = random.Random(7), 0, open(tmp_path / "replicate.log", "a")
    try:
        for i in range(4):
            proc = start_replicate(stack, cluster, set_name, target.dsn, log, "--batch-changes", "200")
            time.sleep(rnd.uniform(2.0, 5.0))
            if i == 1:
                with db.cursor() as cur:  # a TRUNCATE and DDL mid-stream, while the load goes on
                    cur.execute(f'TRUNCATE "{schema}".tags')
                    cur.execute(f'ALTER TABLE "{schema}".accounts ADD COLUMN extra text DEFAULT \'x\'')
                    cur.execute(f'ALTER TABLE "{schema}".accounts RENAME COLUMN extra TO extra2')
                    cur.execute(f'ALTER TABLE "{schema}".tags ADD COLUMN w int')
                    cur.execute(f'ALTER TABLE "{schema}".tags DROP COLUMN w')
            assert proc.poll() is None, (tmp_path / "replicate.log").read_text()
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
            kills += 1
    finally:
        load.stop()
    caught_up(stack, cluster, set_name, timeout=180)
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", set_name, "--target", target.dsn,
                           "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr + (tmp_path / "replicate.log").read_text()
    assert kills == 4
    assert_equal(db, tconn, schema)
    with tconn.cursor() as cur:
        cur.execute("SELECT count(*) FILTER (WHERE op = 'UPDATE'), count(*) - count(DISTINCT id) "
                    "FROM public.ledger_audit")
        updates, repeated = cur.fetchone()
        cur.execute("SELECT transactions, set_version FROM pgshovel2_replica.position")
        transactions, version = cur.fetchone()
    assert (updates, repeated) == (0, 0), "a ledger insert was applied twice"
    assert transactions > 0 and version >= 2
    tconn.close()


def test_replicate_from_kafka_snapshot_rows(stack, cluster, db, schema, relay_factory, tmp_path, target):
    """--bootstrap kafka: the relay's op=r snapshot rows are the starting point."""
    set_name = make_set(stack, cluster, db, schema, tmp_path, name="repk")
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".accounts SET id = id + 10000 WHERE id <= 5')  # key updates
        cur.execute(f'DELETE FROM "{schema}".tags WHERE a = 3')
        cur.execute(f'INSERT INTO "{schema}".ledger (account, amount) VALUES (1, 2), (3, 4)')
    caught_up(stack, cluster, set_name)
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", set_name, "--target", target.dsn,
                           "--bootstrap", "kafka", "--until-caught-up"], env=cli_env(stack, cluster),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tconn = target.connect()
    assert_equal(db, tconn, schema)
    tconn.close()


TYPED = """CREATE TABLE {s}.typed (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz, tm time,
  n numeric(10,2), by bytea, u uuid, j jsonb, ia int[], da date[], f8 float8, t text, z float4, fa float8[]);
INSERT INTO {s}.typed VALUES
  (1, '2024-02-29', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789012+02', '23:59:59.999999',
   12345678.91, '\\x00ff00', '6ecd8c99-4036-403d-bf84-cf8400f67836', '{{"a": [1, null]}}', '{{1,NULL,3}}',
   '{{2024-01-01,NULL}}', 'NaN', 'héllo 🐘', '-0', '{{-0,NaN,-Infinity,0.30000000000000004}}'),
  (2, 'infinity', '-infinity', 'infinity', '00:00:00', -0.5, '', NULL, '[]', '{{}}', '{{}}', '-Infinity', '',
   'Infinity', '{{}}'),
  (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"""


def test_replicate_from_spark_bootstrap(stack, cluster, db, schema, relay_factory, tmp_path, target, spark):
    """--from-bootstrap: a Spark bootstrap's Parquet (plain and converted columns) + the stream after it."""
    from pgshovel2.cluster import ClusterStore
    from pgshovel2.sparkjobs import bootstrap

    s = f'"{schema}"'
    set_name = make_set(stack, cluster, db, schema, tmp_path, name="repp")
    with db.cursor() as cur:
        cur.execute(TYPED.format(s=s))
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "typed"}], topic_prefix=f"typ{cluster}")
    pgshovel(stack, cluster, "set", "create", "typ", str(cfg))
    for name in (set_name, "typ"):
        relay_factory(name).wait_for("snapshot done")
    with db.cursor() as cur:  # before the bootstrap: in the Parquet
        cur.execute(f"UPDATE {s}.accounts SET balance = -1 WHERE id <= 10")
    manifests = {}
    with ClusterStore(stack.zk, cluster) as store:
        for name in (set_name, "typ"):
            opts = bootstrap.BootstrapOptions(str(tmp_path / f"boot-{name}"), stack.bootstrap, stack.registry)
            manifests[name] = bootstrap.run(spark, store, name, opts)
    with db.cursor() as cur:  # after it: from the stream
        cur.execute(f"UPDATE {s}.accounts SET id = id + 5000 WHERE id BETWEEN 11 AND 15")
        cur.execute(f"DELETE FROM {s}.tags WHERE a = 7")
        cur.execute(f"INSERT INTO {s}.ledger (account, amount) VALUES (1, 2)")
        cur.execute(f"UPDATE {s}.typed SET tm = '12:00', da = '{{-infinity}}' WHERE id = 2")
    for name in (set_name, "typ"):
        caught_up(stack, cluster, name)
        done = subprocess.run([str(BIN / "pgshovel"), "replicate", name, "--target", target.dsn,
                               "--from-bootstrap", str(tmp_path / f"boot-{name}"), "--until-caught-up"],
                              env=cli_env(stack, cluster), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "loaded" in done.stderr and "rows from the bootstrap" in done.stderr
    tconn = target.connect()
    assert_equal(db, tconn, schema)
    rows = []
    for conn in (db, tconn):  # as text: psycopg2 cannot parse infinite dates
        with conn.cursor() as cur:  # the whole row (the table has a column named t)
            cur.execute(f"SELECT typed_row::text FROM {s}.typed typed_row ORDER BY id")
            rows.append(cur.fetchall())
    assert rows[0] == rows[1] and len(rows[0]) == 3
    tconn.close()


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_replicate_special_values_exactly(stack, cluster, db, schema, relay_factory, tmp_path, target, encoding):
    """Multi-dimensional, empty and bounded arrays, -0/NaN/±Infinity, the JSON literal null and SQL
    NULL reach the target as the source values (compared as row text), from snapshot rows and from
    the stream; array keys are updated and deleted by key."""
    from tests.integration.test_types import SPECIAL

    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {s}.vals (id int PRIMARY KEY, {', '.join(f'{n} {t}' for n, t, _ in SPECIAL)})")
        cur.execute(f"CREATE TABLE {s}.vk (k int[] PRIMARY KEY, v text)")
        for row in (0, 1):  # in the relay's snapshot
            cur.execute(f"INSERT INTO {s}.vals VALUES ({row + 1}, {', '.join(v[row] for _, _, v in SPECIAL)})")
        cur.execute(f"INSERT INTO {s}.vk VALUES ('{{1,2}}', 'a'), ('{{{{1,2}},{{3,4}}}}', 'b'), ('{{}}', 'c')")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": n} for n in ("vals", "vk")], encoding=encoding,
                       topic_prefix=f"sv{cluster}")
    pgshovel(stack, cluster, "set", "create", "sv", str(cfg))
    relay_factory("sv").wait_for("snapshot done")
    with db.cursor() as cur:  # from the stream
        for row in (2, 3):
            cur.execute(f"INSERT INTO {s}.vals VALUES ({row + 1}, {', '.join(v[row] for _, _, v in SPECIAL)})")
        cur.execute(f"INSERT INTO {s}.vals (id) VALUES (5)")
        cur.execute(f"UPDATE {s}.vals SET af8 = '[2:2]={{-0}}', jb = 'null' WHERE id = 1")
        cur.execute(f"UPDATE {s}.vk SET v = 'B' WHERE k = '{{{{1,2}},{{3,4}}}}'")
        cur.execute(f"DELETE FROM {s}.vk WHERE k = '{{1,2}}'")
        cur.execute(f"UPDATE {s}.vk SET k = '{{{{{{7}}}}}}' WHERE k = '{{}}'")
    caught_up(stack, cluster, "sv")
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", "sv", "--target", target.dsn, "--bootstrap", "kafka",
                           "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    tconn = target.connect()
    for table in ("vals", "vk"):
        rows = []
        for conn in (db, tconn):
            with conn.cursor() as cur:
                cur.execute(f"SELECT whole_row::text FROM {s}.{table} whole_row ORDER BY 1")
                rows.append([r[0] for r in cur.fetchall()])
        assert rows[0] == rows[1], f"{table}: source {rows[0]} != target {rows[1]}"
    assert len(rows[0]) == 2
    tconn.close()
