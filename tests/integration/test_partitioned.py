"""Partitioned tables on every capture path (trigger with C and PL/pgSQL capture, logical with our
plugin and with pgoutput): a set names the partitioned table; changes to any partition (existing,
created or attached later, two levels deep) reach the table's topic with its key and columns; a
row moving between partitions is a delete and a create in one transaction; a TRUNCATE of one
partition reaches consumers as the deletes of the rows it removed. After each step the table is
rebuilt from Kafka by the consumer library and compared with the source, rows and values."""

import time
from decimal import Decimal

import psycopg2
import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import RowState, SetReader
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config

PATHS = {"c": {"backend": "trigger", "capture": "c"}, "plpgsql": {"backend": "trigger", "capture": "plpgsql"},
         "pgshovel2": {"backend": "logical"}, "pgoutput": {"backend": "pgoutput"}}


@pytest.fixture(params=list(PATHS))
def path(request) -> str:
    """The capture path: trigger backend with C or PL/pgSQL capture, logical with our plugin or pgoutput."""
    return request.param


def make_orders(cur, schema: str) -> str:
    """orders, range-partitioned by day with a composite key (id, day), a column dropped before its
    partitions exist (so theirs have other attnums), a default partition and a two-level partition
    (2026, by id); rows in each. Returns the quoted table name."""
    t = f'"{schema}".orders'
    cur.execute(f"CREATE TABLE {t} (id int NOT NULL, gone int, day date NOT NULL, note text, amount numeric(12,2), "
                f"PRIMARY KEY (id, day)) PARTITION BY RANGE (day)")
    cur.execute(f"ALTER TABLE {t} DROP COLUMN gone")
    for year in (2024, 2025):
        cur.execute(f"CREATE TABLE \"{schema}\".orders_{year} PARTITION OF {t} "
                    f"FOR VALUES FROM ('{year}-01-01') TO ('{year + 1}-01-01')")
    cur.execute(f"CREATE TABLE \"{schema}\".orders_2026 PARTITION OF {t} "
                "FOR VALUES FROM ('2026-01-01') TO ('2027-01-01') PARTITION BY RANGE (id)")
    cur.execute(f"CREATE TABLE \"{schema}\".orders_2026_lo PARTITION OF \"{schema}\".orders_2026 "
                "FOR VALUES FROM (MINVALUE) TO (1000)")
    cur.execute(f"CREATE TABLE \"{schema}\".orders_2026_hi PARTITION OF \"{schema}\".orders_2026 "
                "FOR VALUES FROM (1000) TO (100000)")
    cur.execute(f"CREATE TABLE \"{schema}\".orders_other PARTITION OF {t} DEFAULT")
    cur.execute(f"INSERT INTO {t} SELECT g, DATE '2024-01-01' + (g * 7) % 1200, 'n' || g, g * 1.25 "
                "FROM generate_series(1, 300) g")
    return t


def consumer_rows(stack, cluster: str, set_name: str) -> dict[tuple, tuple]:
    """The table as the consumer library's RowState rebuilds it from Kafka: (id, day) -> its values."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry)
    state = RowState()
    with reader:
        state.apply_all(reader.transactions(until_caught_up=True))
    (rows,) = state.tables.values()
    return {(v["id"], str(v["day"])): (v["note"], Decimal(str(v["amount"]))) for v in rows.values()}


def source_rows(db, table: str) -> dict[tuple, tuple]:
    with db.cursor() as cur:
        cur.execute(f"SELECT id, day, note, amount FROM {table}")
        return {(i, str(d)): (n, a) for i, d, n, a in cur.fetchall()}


def check(stack, cluster: str, set_name: str, db, table: str) -> None:
    """Kafka holds exactly the table: set verify, and the consumer library's rebuild, values too."""
    caught_up(stack, cluster, set_name)
    assert_verified(verify(stack, cluster, set_name))
    got, want = consumer_rows(stack, cluster, set_name), source_rows(db, table)
    assert got == want, (sorted(got.keys() - want.keys())[:5], sorted(want.keys() - got.keys())[:5])


def set_config(tmp_path, stack, schema: str, path: str, prefix: str, encoding: str = "json"):
    options = dict(PATHS[path])
    backend = options.pop("backend")
    return write_config(tmp_path, stack, [{"schema": schema, "name": "orders"}], encoding=encoding,
                        backend=backend, topic_prefix=prefix, **options)


def test_partitions_go_to_the_tables_topic(stack, cluster, db, schema, tmp_path, relay_factory, path):
    with db.cursor() as cur:
        table = make_orders(cur, schema)
    prefix = f"parts{path}{cluster}"
    cfg = set_config(tmp_path, stack, schema, path, prefix, encoding="avro")
    pgshovel(stack, cluster, "set", "create", "parts", str(cfg))
    relay = relay_factory("parts")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1001, '2024-03-01', 'a', 1), (1002, '2025-03-01', 'b', 2), "
                    "(1003, '2026-03-01', 'c', 3), (5, '2026-04-01', 'd', 4), (1004, '2031-01-01', 'e', 5)")
        cur.execute(f"UPDATE {table} SET note = note || '!' WHERE id % 5 = 0")
        cur.execute(f"DELETE FROM {table} WHERE id % 7 = 0")
        cur.execute(f"UPDATE {table} SET day = '2026-06-06' WHERE id = 1002")  # 2025 -> 2026_hi
    check(stack, cluster, "parts", db, table)
    topic = names.table_topic(prefix, schema, "orders")
    moved = sorted((h["pgshovel.position"], str(k["day"]), h["pgshovel.op"], h["pgshovel.txid"])
                   for k, _, h in messages(stack, topic) if k["id"] == 1002)
    assert [m[1:3] for m in moved] == [("2025-03-01", "c"), ("2025-03-01", "d"), ("2026-06-06", "c")], moved
    assert moved[1][3] == moved[2][3]  # the move: a delete and a create in one transaction
    # TRUNCATE of one partition, of a sub-partitioned partition, and writes after them in one transaction
    with db.cursor() as cur:
        cur.execute(f'TRUNCATE "{schema}".orders_2025')
        cur.execute("BEGIN")
        cur.execute(f'TRUNCATE "{schema}".orders_2026')
        cur.execute(f"INSERT INTO {table} VALUES (2001, '2026-01-02', 'after', 1)")
        cur.execute(f'TRUNCATE "{schema}".orders_other')
        cur.execute("COMMIT")
    check(stack, cluster, "parts", db, table)
    # the parent's TRUNCATE stays one TRUNCATE record; a partition's after it in the transaction is captured
    with db.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"TRUNCATE {table}")
        cur.execute(f"INSERT INTO {table} VALUES (3001, '2024-05-05', 'x', 1), (3002, '2025-05-05', 'y', 2)")
        cur.execute(f'TRUNCATE "{schema}".orders_2025')
        cur.execute("COMMIT")
    check(stack, cluster, "parts", db, table)
    assert relay.stop() == 0


def wait_for_truncate_trigger(db, partition: str, timeout: float = 30) -> None:
    """Wait until partition has a set's TRUNCATE trigger (added by the pgshovel2 extension's event
    trigger in the DDL's transaction, else by the relay within seconds)."""
    deadline = time.monotonic() + timeout
    with db.cursor() as cur:
        while True:
            cur.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE '%%\\_tp'",
                        (partition,))
            if cur.fetchone()[0]:
                return
            assert time.monotonic() < deadline, f"{partition} got no TRUNCATE trigger within {timeout}s"
            time.sleep(0.2)


def test_partitions_created_and_attached_later(stack, cluster, db, schema, tmp_path, relay_factory, path):
    """Partitions created (PARTITION OF, also below a partitioned partition) and attached (a table
    of another column order, with a dropped column) after set create: their rows, changes and
    TRUNCATEs reach the table's topic."""
    with db.cursor() as cur:
        table = make_orders(cur, schema)
    cfg = set_config(tmp_path, stack, schema, path, f"later{path}{cluster}")
    pgshovel(stack, cluster, "set", "create", "later", str(cfg))
    relay = relay_factory("later")
    relay.wait_for("snapshot done")
    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f"DELETE FROM {s}.orders_other WHERE day >= '2027-01-01'")
        cur.execute(f"CREATE TABLE {s}.orders_2027 PARTITION OF {table} "
                    "FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')")
        cur.execute(f"CREATE TABLE {s}.orders_2026_top PARTITION OF {s}.orders_2026 "
                    "FOR VALUES FROM (100000) TO (MAXVALUE)")
        cur.execute(f"CREATE TABLE {s}.orders_x (pad int, amount numeric(12,2), note text, day date NOT NULL, "
                    "id int NOT NULL)")
        cur.execute(f"ALTER TABLE {s}.orders_x DROP COLUMN pad")
        cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {s}.orders_x "
                    "FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')")
        cur.execute(f"INSERT INTO {table} SELECT g, DATE '2027-01-01' + g % 700, 'late' || g, g "
                    "FROM generate_series(1000, 1300) g")
        cur.execute(f"INSERT INTO {table} SELECT g, DATE '2026-02-02' + g % 300, 'top' || g, g "
                    "FROM generate_series(100000, 100100) g")
        cur.execute(f"UPDATE {table} SET note = 'moved', day = day + 365 WHERE id % 10 = 0")
        cur.execute(f"UPDATE {table} SET amount = amount + 1 WHERE day >= '2028-01-01' AND id % 3 = 0")
    check(stack, cluster, "later", db, table)
    with db.cursor() as cur:  # DDL on the table (recursing to its partitions) and on a partition alone
        cur.execute(f"ALTER TABLE {table} ADD COLUMN extra text")
        cur.execute(f"ALTER TABLE {s}.orders_2027 ADD CONSTRAINT positive CHECK (id > 0)")
        cur.execute(f"UPDATE {table} SET extra = 'e' || id WHERE id % 4 = 0")
        cur.execute(f"UPDATE {table} SET extra = '' WHERE extra IS NULL")  # every row in the new layout (verify)
        cur.execute(f"INSERT INTO {table} VALUES (1500, '2027-05-05', 'with extra', 2, 'x'), "
                    "(1501, '2028-05-05', 'attached one', 3, 'y'), (100500, '2026-05-05', 'top', 4, 'z')")
    check(stack, cluster, "later", db, table)
    for partition in ("orders_2027", "orders_2026_top", "orders_x"):
        wait_for_truncate_trigger(db, f"{s}.{partition}")
    with db.cursor() as cur:
        cur.execute(f"TRUNCATE {s}.orders_2027")
        cur.execute(f"TRUNCATE {s}.orders_x, {s}.orders_2026_top")
    check(stack, cluster, "later", db, table)
    assert relay.stop() == 0


def refused(stack, cluster: str, name: str, cfg) -> str:
    """The error of a set create that must fail; nothing of the set is left in the database."""
    proc = pgshovel(stack, cluster, "set", "create", name, str(cfg), check=False)
    assert proc.returncode != 0, proc.stdout
    with psycopg2.connect(stack.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s", (f"pgshovel2\\_{name}\\_%",))
        assert cur.fetchone()[0] == 0
    return proc.stderr


def test_overlapping_partitions_are_refused(stack, cluster, db, schema, tmp_path, path):
    """A set naming a table and one of its partitions (any depth), or a partition of a table
    another set captures (or a table of which another set captures a partition), is refused,
    naming both tables; set upgrade too."""
    with db.cursor() as cur:
        make_orders(cur, schema)
    entry = {"schema": schema, "name": "orders"}
    for partition in ("orders_2024", "orders_2026_lo"):
        cfg = write_config(tmp_path, stack, [entry, {"schema": schema, "name": partition}], topic_prefix=f"x{cluster}")
        err = refused(stack, cluster, "both", cfg)
        assert (f'tables[1]: table "{schema}"."{partition}" is a partition of "{schema}"."orders" (tables[0])'
                in err), err
    pgshovel(stack, cluster, "set", "create", "whole", str(set_config(tmp_path, stack, schema, path, f"w{cluster}")))
    for partition in ("orders_2025", "orders_2026", "orders_2026_hi"):
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": partition}], topic_prefix=f"p{cluster}")
        err = refused(stack, cluster, "part", cfg)
        assert f'it is a partition of "{schema}"."orders", which is captured by another set (' in err, err
    options = dict(PATHS[path])
    backend = options.pop("backend")
    upgraded = write_config(tmp_path, stack, [entry, {"schema": schema, "name": "orders_2024"}], encoding="json",
                            backend=backend, topic_prefix=f"w{cluster}", **options)
    proc = pgshovel(stack, cluster, "set", "upgrade", "whole", str(upgraded), check=False)
    assert proc.returncode != 0 and "is a partition of" in proc.stderr, proc.stderr
    pgshovel(stack, cluster, "set", "drop", "whole")
    pgshovel(stack, cluster, "set", "create", "part", str(write_config(
        tmp_path, stack, [{"schema": schema, "name": "orders_2024"}], topic_prefix=f"p{cluster}")))
    err = refused(stack, cluster, "whole", set_config(tmp_path, stack, schema, path, f"w{cluster}"))
    assert f'its partition "{schema}"."orders_2024" is captured by another set (trigger pgshovel2_part_' in err, err


def test_attach_detach_and_drop_of_partitions(stack, cluster, db, schema, tmp_path, relay_factory, path):
    """On a server with the pgshovel2 extension (event triggers): the rows of a table ATTACHed as a
    partition arrive as creates, those of a partition DETACHed (also a partitioned one) leave as
    deletes, in the DDL's transaction; DROP TABLE of a partition is refused (DETACH first)."""
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgshovel2 CASCADE")
        table = make_orders(cur, schema)
    cfg = set_config(tmp_path, stack, schema, path, f"move{path}{cluster}")
    pgshovel(stack, cluster, "set", "create", "move", str(cfg))
    relay = relay_factory("move")
    relay.wait_for("snapshot done")
    s = f'"{schema}"'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {s}.orders_x (pad int, amount numeric(12,2), note text, day date NOT NULL, "
                    "id int NOT NULL)")
        cur.execute(f"ALTER TABLE {s}.orders_x DROP COLUMN pad")
        cur.execute(f"INSERT INTO {s}.orders_x SELECT g, 'attached', DATE '2028-01-01' + g, g "
                    "FROM generate_series(1, 150) g")
        cur.execute(f"DELETE FROM {s}.orders_other WHERE day >= '2028-01-01'")
        cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {s}.orders_x "
                    "FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')")
        cur.execute("BEGIN")
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_2025")
        cur.execute(f"INSERT INTO {table} VALUES (7001, '2024-07-07', 'same txn', 1)")
        cur.execute("COMMIT")
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_2026")
    check(stack, cluster, "move", db, table)
    with db.cursor() as cur:
        with pytest.raises(psycopg2.Error, match="DROP TABLE of .*orders_2024, a partition of a table a replication "
                                                 "set captures"):
            cur.execute(f"DROP TABLE {s}.orders_2024")
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_2024")
        cur.execute(f"DROP TABLE {s}.orders_2024")
        cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {s}.orders_2025 "
                    "FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')")
        cur.execute(f"UPDATE {table} SET note = 'back' WHERE day < '2026-01-01'")
    check(stack, cluster, "move", db, table)
    with db.cursor() as cur:  # CONCURRENTLY (two transactions; not with a default partition)
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_other")
        cur.execute(f"DROP TABLE {s}.orders_other")
        cur.execute(f"ALTER TABLE {table} DETACH PARTITION {s}.orders_x CONCURRENTLY")
    check(stack, cluster, "move", db, table)
    assert relay.stop() == 0


@pytest.mark.parametrize("backend", ["logical", "pgoutput"])
def test_partitions_replica_identity_is_checked(stack, cluster, db, schema, tmp_path, backend):
    """The WAL logs a partition's old rows by the partition's own replica identity: a logical set is
    refused naming each partition whose identity does not log the key (here NOTHING), whatever the
    table's own (FULL)."""
    with db.cursor() as cur:
        make_orders(cur, schema)
        cur.execute(f'ALTER TABLE "{schema}".orders_2026_lo REPLICA IDENTITY NOTHING')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "orders"}], backend=backend,
                       envelope="debezium", topic_prefix=f"ri{cluster}")  # FULL on the table only
    err = refused(stack, cluster, "ri", cfg)
    assert f"its partition {schema}.orders_2026_lo: its key" in err and "replica identity NOTHING" in err, err
    with db.cursor() as cur:
        cur.execute("SELECT p.relid::regclass::text FROM pg_partition_tree(%s::regclass) p WHERE p.isleaf",
                    (f'"{schema}".orders',))
        for (leaf,) in cur.fetchall():
            cur.execute(f"ALTER TABLE {leaf} REPLICA IDENTITY FULL")
    pgshovel(stack, cluster, "set", "create", "ri", str(cfg))


OLD_TRIGGERS = r"SELECT tgname, tgrelid::regclass::text FROM pg_trigger WHERE tgname ~ '^pgshovel2_old_.*_t[abp]$'"


def test_cluster_upgrade_gives_older_sets_their_truncate_triggers(stack, cluster, db, schema, tmp_path, path):
    """A set created before the TRUNCATE triggers existed (here: its triggers dropped) gets them, and
    pgshovel2_pl where it runs its functions, from pgshovel cluster upgrade."""
    with db.cursor() as cur:
        make_orders(cur, schema)
    pgshovel(stack, cluster, "set", "create", "old", str(set_config(tmp_path, stack, schema, path, f"old{cluster}")))
    with db.cursor() as cur:
        cur.execute(OLD_TRIGGERS)
        triggers = sorted(cur.fetchall())
        assert len(triggers) == 2 + 5, triggers  # B_tb, B_ta on the table; B_tp on its five leaves
        for name, rel in triggers:
            cur.execute(f'DROP TRIGGER "{name}" ON {rel}')
    out = pgshovel(stack, cluster, "cluster", "upgrade").stdout
    for name in {name for name, _rel in triggers}:
        assert out.count(f"set 'old': trigger {name} on ") == [n for n, _ in triggers].count(name), out
    with db.cursor() as cur:
        cur.execute(OLD_TRIGGERS)
        assert sorted(cur.fetchall()) == triggers
    assert "set 'old': trigger" not in pgshovel(stack, cluster, "cluster", "upgrade").stdout
