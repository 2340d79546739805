"""Online snapshots (pgshovel set snapshot) of a streaming set under concurrent writers: the state
rebuilt from the table's topic *from the request on* (the online snapshot's op r rows and the
stream after them, without the initial snapshot or anything before) equals the table, and no key
has two op r rows of one request."""

import signal
import time

import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config
from tests.online import check_suffix, end_offsets, rebuilt_with_latest_schema, start_writers, stop_writers, wait_state

ROWS = 6000


@pytest.fixture(params=["trigger", "logical", "pgoutput"])
def backend(request) -> str:
    return request.param


def make_set(stack, cluster, db, schema, tmp_path, set_name: str, backend: str, extra_tables: int = 0) -> str:
    table = f'"{schema}".{set_name}'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {table} SELECT g, 0, 'x' FROM generate_series(1, %s) g", (ROWS,))
        for i in range(extra_tables):
            cur.execute(f'CREATE TABLE "{schema}".other{i} (a int, b text, PRIMARY KEY (b, a))')
            cur.execute(f"INSERT INTO \"{schema}\".other{i} SELECT g, 'k' || (g % 7) "
                        "FROM generate_series(1, 1000) g")
    tables = [{"schema": schema, "name": set_name}] + [{"schema": schema, "name": f"other{i}"}
                                                        for i in range(extra_tables)]
    cfg = write_config(tmp_path, stack, tables, topic_prefix=f"{set_name}{cluster}", backend=backend)
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    return table


def topic_of(schema: str, set_name: str, cluster: str) -> str:
    return names.table_topic(f"{set_name}{cluster}", schema, set_name)


def finish(stack, cluster, set_name, schema, start, stop, threads, relay) -> int:
    stop_writers(stop, threads)
    caught_up(stack, cluster, set_name)
    tag = names.qualified(schema, set_name)
    reads, per_key = check_suffix(stack, cluster, set_name, tag, start)
    assert reads > ROWS // 4, reads  # most rows came from the online snapshot
    assert max(per_key.values()) == 1, per_key.most_common(3)
    assert_verified(verify(stack, cluster, set_name))
    marks = [v for _, v, _ in messages(stack, names.transactions_topic(f"{set_name}{cluster}"))
             if v["type"].startswith("SNAPSHOT_")]
    topic = topic_of(schema, set_name, cluster)
    assert [(m["type"], m["table"]) for m in marks] == [("SNAPSHOT_BEGIN", topic), ("SNAPSHOT_END", topic)]
    assert marks[1]["event_count"] == reads and marks[0]["txid"] == 0
    assert relay.stop() == 0
    return reads


def test_online_snapshot_under_writers(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    table = make_set(stack, cluster, db, schema, tmp_path, "onl", backend, extra_tables=1)
    relay = relay_factory("onl")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    time.sleep(0.5)
    start = end_offsets(stack.bootstrap, topic_of(schema, "onl", cluster))
    pgshovel(stack, cluster, "set", "snapshot", "onl", "--table", f"{schema}.onl", "--chunk-size", "250")
    wait_state(stack, cluster, "onl", "done")
    out = pgshovel(stack, cluster, "set", "snapshot", "onl", "--status").stdout
    assert "done" in out and "chunks" in out, out
    finish(stack, cluster, "onl", schema, start, stop, threads, relay)
    assert "online snapshot" in relay.log()


def test_refused_requests_change_nothing(stack, cluster, db, schema, tmp_path):
    make_set(stack, cluster, db, schema, tmp_path, "bad", "trigger")
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".nokey (a int)')
    cases = [(["--table", f"{schema}.nope"], "is not a table of set 'bad'"),
             (["--where", "no_such_column > 1"], "no_such_column"),
             (["--where", "true; DROP TABLE " + f'"{schema}".bad'], "';'"),
             (["--chunk-size", "0"], "chunk-size"),
             (["--table", f"{schema}.nokey"], "is not a table of set 'bad'")]
    with db.cursor() as cur:  # a keyless table of the set is refused by name
        cur.execute(f'CREATE TABLE "{schema}".nokey2 (a int)')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "nokey2", "allow_unkeyed": True}],
                       topic_prefix=f"nk{cluster}")
    pgshovel(stack, cluster, "set", "create", "nk", str(cfg))
    proc = pgshovel(stack, cluster, "set", "snapshot", "nk", check=False)
    assert proc.returncode == 1 and 'nokey2" has no primary key' in proc.stderr, proc.stderr
    for args, text in cases:
        proc = pgshovel(stack, cluster, "set", "snapshot", "bad", *args, check=False)
        assert proc.returncode == 1 and proc.stderr.startswith("error:") and text in proc.stderr, (args, proc.stderr)
    with db.cursor() as cur:
        cur.execute(f'SELECT count(*) FROM "{schema}".bad')
        assert cur.fetchone()[0] == ROWS
    out = pgshovel(stack, cluster, "set", "snapshot", "bad", "--status").stdout
    assert "none requested" in out


def test_killed_relay_resumes_without_duplicates(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    table = make_set(stack, cluster, db, schema, tmp_path, "kil", backend)
    relay = relay_factory("kil")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    start = end_offsets(stack.bootstrap, topic_of(schema, "kil", cluster))
    pgshovel(stack, cluster, "set", "snapshot", "kil", "--chunk-size", "100")
    for _ in range(3):
        relay.wait_for("online snapshot")
        time.sleep(0.7)
        relay.stop(signal.SIGKILL)
        relay = relay_factory("kil")
    wait_state(stack, cluster, "kil", "done")
    finish(stack, cluster, "kil", schema, start, stop, threads, relay)


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_pause_resume_cancel(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    table = make_set(stack, cluster, db, schema, tmp_path, "pau", backend)
    relay = relay_factory("pau")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    start = end_offsets(stack.bootstrap, topic_of(schema, "pau", cluster))
    # 600 chunks: with the native lane 100-row chunks could all be done before --pause lands
    pgshovel(stack, cluster, "set", "snapshot", "pau", "--chunk-size", "10")
    relay.wait_for("online snapshot")
    pgshovel(stack, cluster, "set", "snapshot", "pau", "--pause")
    time.sleep(1.5)
    status = pgshovel(stack, cluster, "set", "snapshot", "pau", "--status").stdout
    assert "paused" in status, status
    pgshovel(stack, cluster, "set", "snapshot", "pau", "--resume")
    wait_state(stack, cluster, "pau", "done")
    finish(stack, cluster, "pau", schema, start, stop, threads, relay)

    relay = relay_factory("pau")
    pgshovel(stack, cluster, "set", "snapshot", "pau", "--chunk-size", "10")
    pgshovel(stack, cluster, "set", "snapshot", "pau", "--cancel")
    wait_state(stack, cluster, "pau", "cancelled")
    proc = pgshovel(stack, cluster, "set", "snapshot", "pau", "--resume", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error:") and "cancelled" in proc.stderr, proc.stderr
    caught_up(stack, cluster, "pau")
    assert_verified(verify(stack, cluster, "pau"))


def test_upgrade_adding_a_table_snapshots_it(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    make_set(stack, cluster, db, schema, tmp_path, "upg", backend)
    added = f'"{schema}".added'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {added} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {added} SELECT g, 0, 'x' FROM generate_series(1, %s) g", (ROWS,))
    relay = relay_factory("upg")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, added, ROWS)
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "upg"}, {"schema": schema, "name": "added"}],
                       topic_prefix=f"upg{cluster}", backend=backend)
    out = pgshovel(stack, cluster, "set", "upgrade", "upg", str(cfg)).stdout
    assert "online snapshot" in out and "requested" in out, out
    wait_state(stack, cluster, "upg", "done")
    stop_writers(stop, threads)
    caught_up(stack, cluster, "upg")
    reads, per_key = check_suffix(stack, cluster, "upg", names.qualified(schema, "added"), {0: 0})
    assert reads > ROWS // 4 and max(per_key.values()) == 1, (reads, per_key.most_common(2))
    assert_verified(verify(stack, cluster, "upg"))
    assert relay.stop() == 0


def test_ddl_during_the_online_snapshot(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    """ADD COLUMN while chunks are read (each backend and decoder): a chunk read across it is read
    again in the new layout; the state rebuilt from the request on (each value read with its own
    schema, resolved to the latest) equals the table."""
    table = make_set(stack, cluster, db, schema, tmp_path, "ddl", backend)
    relay = relay_factory("ddl")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    topic = topic_of(schema, "ddl", cluster)
    start = end_offsets(stack.bootstrap, topic)
    # 300 chunks: at a Kafka commit every 10 ms (logical) 100-row chunks could all be done before the DDL
    pgshovel(stack, cluster, "set", "snapshot", "ddl", "--chunk-size", "20")
    relay.wait_for("online snapshot")
    time.sleep(1)
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} ADD COLUMN extra text")
    with ClusterStore(stack.zk, cluster) as store:  # the DDL committed while chunks were still due
        assert store.get_snapshot_request("ddl")[0]["state"] == "active"
    time.sleep(1)
    with db.cursor() as cur:
        cur.execute(f"UPDATE {table} SET extra = 'e' || id WHERE id % 97 = 0")
    wait_state(stack, cluster, "ddl", "done")
    stop_writers(stop, threads)
    caught_up(stack, cluster, "ddl")
    rebuilt = rebuilt_with_latest_schema(stack, topic, start)
    with db.cursor() as cur:
        cur.execute(f"SELECT id, to_jsonb(t.*) FROM {table} t")
        source = dict(cur.fetchall())
    assert rebuilt.keys() == source.keys()
    differ = [k for k in source if rebuilt[k] != source[k]]
    assert not differ, [(rebuilt[k], source[k]) for k in differ[:3]]
    assert relay.stop() == 0


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_relay_snapshot_option_uses_the_online_mechanism(stack, cluster, db, schema, tmp_path, relay_factory,
                                                         backend):
    """A relay started with --snapshot on a set with a committed position requests an online snapshot
    of every table (no new handoff, no table re-sent in one Kafka transaction): under writers, the
    state rebuilt from that start on equals each table, no key read twice."""
    table = make_set(stack, cluster, db, schema, tmp_path, "fsn", backend, extra_tables=1)
    relay = relay_factory("fsn")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    time.sleep(0.5)
    assert relay.stop() == 0
    start = end_offsets(stack.bootstrap, topic_of(schema, "fsn", cluster))
    other = names.table_topic(f"fsn{cluster}", schema, "other0")
    other_start = end_offsets(stack.bootstrap, other)
    relay = relay_factory("fsn", "--snapshot")
    relay.wait_for("every table of the set requested")
    request = wait_state(stack, cluster, "fsn", "done")
    assert sorted(request["tables"]) == sorted([f'"{schema}"."fsn"', f'"{schema}"."other0"']), request
    assert relay.log().count("taking the initial snapshot") == 1  # the first start's only (one log file)
    stop_writers(stop, threads)
    caught_up(stack, cluster, "fsn")
    reads, per_key = check_suffix(stack, cluster, "fsn", names.qualified(schema, "fsn"), start)
    assert reads > ROWS // 4 and max(per_key.values()) == 1, (reads, per_key.most_common(2))
    reads, per_key = check_suffix(stack, cluster, "fsn", names.qualified(schema, "other0"), other_start)
    assert reads == 1000 and max(per_key.values()) == 1, (reads, per_key.most_common(2))
    assert_verified(verify(stack, cluster, "fsn"))
    assert relay.stop() == 0
