"""The unchanged-TOAST scenario shared by test_unchanged_toast*.py: a logical set on a table with
a 1 MB incompressible (md5 text) value, REPLICA IDENTITY DEFAULT (or FULL), UPDATEs that leave it
unchanged, a delete and re-insert of the same key with a new value, an UPDATE of the key; then
Kafka, set verify, the consumer library's RowState and replicate are checked against the table."""

import hashlib
import json
import subprocess

import psycopg2

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import RowState, SetReader
from tests.helpers import BIN, assert_verified, caught_up, cli_env, messages, pgshovel, verify, write_config

BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 32768))"  # 1 MiB, random


def run(stack, cluster, db, schema, tmp_path, relay_factory, target, decoder: str, identity: str) -> None:
    """The whole scenario with decoder (pgshovel2 | pgoutput) and identity (DEFAULT | FULL |
    ``DEFAULT NOT NULL``: big is NOT NULL, so its Avro field is made nullable by set create)."""
    t = f'"{schema}".t'
    identity, _, not_null = identity.partition(" ")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int, big text {not_null})")
        cur.execute(f"INSERT INTO {t} VALUES (1, 0, {BIG}), (2, 0, {BIG})")
    set_name = f"toast{decoder[:4]}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend="logical",
                       decoder=decoder, topic_prefix=f"{set_name}{cluster}")
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY {identity}")
    created = pgshovel(stack, cluster, "set", "create", set_name, str(cfg)).stdout
    assert ('"big" nullable in the value schema' in created) == (identity == "DEFAULT" and bool(not_null)), created
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} VALUES (3, 0, {BIG})")
        cur.execute(f"UPDATE {t} SET n = n + 1")                    # big unchanged on 1, 2, 3
        cur.execute(f"DELETE FROM {t} WHERE id = 3")
        cur.execute(f"INSERT INTO {t} VALUES (3, 10, {BIG})")      # same key, a new value
        cur.execute(f"UPDATE {t} SET n = 11 WHERE id = 3")          # unchanged: the NEW value
        cur.execute(f"UPDATE {t} SET id = 20, n = 20 WHERE id = 2")  # key update, big unchanged
        cur.execute(f"UPDATE {t} SET big = {BIG}, n = 5 WHERE id = 1")
        cur.execute(f"UPDATE {t} SET n = 6 WHERE id = 1")
    caught_up(stack, cluster, set_name, timeout=180)
    check_kafka(stack, names.table_topic(f"{set_name}{cluster}", schema, "t"), identity, db, t)
    assert_verified(verify(stack, cluster, set_name))
    source = rows(db, t)
    assert consumer_rows(stack, cluster, set_name) == source
    replicate(stack, cluster, set_name, target)
    tconn = psycopg2.connect(target.dsn)
    try:
        assert rows(tconn, t) == source
    finally:
        tconn.close()
    assert relay.stop() == 0


def rows(conn, table: str) -> dict[int, tuple]:
    """id -> (n, md5(big), length(big))."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, n, md5(big), length(big) FROM {table}")
        return {r[0]: r[1:] for r in cur.fetchall()}


def check_kafka(stack, topic: str, identity: str, db, table: str) -> None:
    """The UPDATEs leaving big unchanged carry pgshovel.unchanged ["big"] and big null (DEFAULT),
    or big's value and no header (FULL); every value that is there is the right one."""
    got = messages(stack, topic)
    unchanged = [(k["id"], v["n"], h.get("pgshovel.unchanged")) for k, v, h in got
                 if v is not None and v["big"] is None]
    headers = [h.get("pgshovel.unchanged") for _, _, h in got]
    if identity == "FULL":
        assert unchanged == [] and set(headers) == {None}
        return
    big_null = json.dumps(["big"], separators=(",", ":"))
    assert unchanged == [(1, 1, big_null), (2, 1, big_null), (3, 1, big_null), (3, 11, big_null),
                         (20, 20, big_null), (1, 6, big_null)], unchanged
    assert sum(h is not None for h in headers) == len(unchanged)


def consumer_rows(stack, cluster: str, set_name: str) -> dict[int, tuple]:
    """The table as the consumer library's RowState rebuilds it from Kafka."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry)
    state = RowState()
    with reader:
        state.apply_all(reader.transactions(until_caught_up=True))
    (table,) = state.tables.values()
    return {v["id"]: (v["n"], hashlib.md5(v["big"].encode()).hexdigest(), len(v["big"])) for v in table.values()}


def replicate(stack, cluster: str, set_name: str, target) -> None:
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", set_name, "--target", target.dsn,
                           "--bootstrap", "kafka", "--until-caught-up"], env=cli_env(stack, cluster),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
