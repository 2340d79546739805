"""What only the logical backend has: a huge source transaction split over Kafka
transactions and killed in between, a 50 MB value, unchanged TOASTed values,
replica identity checks, zero-column and dropped-column tables, the slot's life
(dropped with the set; a missing slot refused with the way out), the plugin's record
format check, ``--commit-delay``."""

import hashlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics
from pgshovel2.relay.logical.records import records
from pgshovel2.relay.logical.source import RECORD_FORMAT, LogicalSource
from pgshovel2.relay.source import Change, Commit, Idle
from pgshovel2.setrecord import slot_name
from pgshovel2.wire import LOGICAL, Position
from tests.helpers import RelayProcess, assert_verified, caught_up, messages, pgshovel, verify, write_config

# The issue asks for 1M rows; the default suite uses 200k (set LOGICAL_BIG_ROWS=1000000 for the full size).
BIG_ROWS = int(os.environ.get("LOGICAL_BIG_ROWS", "200000"))


def make_set(stack, cluster, db, tmp_path, set_name: str, table_sql: str, schema: str, **table_entry) -> tuple:
    """Create <schema>.t from table_sql (column list) and a logical set on it; returns (table, prefix)."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t ({table_sql})')
    prefix = f"{set_name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t", **table_entry}], backend="logical",
                       topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    return f'"{schema}".t', prefix


@pytest.fixture
def relay(stack, cluster, tmp_path):
    """start(set_name, *args, failpoints="") -> a RelayProcess; all are killed afterwards."""
    started = []

    def start(set_name: str, *args: str, failpoints: str = "") -> RelayProcess:
        log = tmp_path / f"relay-{len(started)}.log"
        proc = RelayProcess(stack, cluster, set_name, *args, log_path=log,
                            extra_env={"PGSHOVEL2_FAILPOINTS": failpoints} if failpoints else None)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(signal.SIGKILL)


def test_huge_transaction_split_and_killed(stack, cluster, db, schema, tmp_path, relay):
    table, prefix = make_set(stack, cluster, db, tmp_path, "big", "id int PRIMARY KEY, n int", schema)
    first = relay("big")
    first.wait_for("snapshot done")
    assert first.stop() == 0
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, {BIG_ROWS}) g")
    kills = resumed = 0
    while kills < 3:  # hard split every 10 x 2000 messages; each run dies right after its first commit
        r = relay("big", "--max-transaction-messages", "2000", failpoints="after_commit=1")
        assert r.proc.wait(600) == -signal.SIGKILL, r.log()
        kills += 1
        resumed += "after its first" in r.log()
    last = relay("big")
    caught_up(stack, cluster, "big", timeout=600)
    assert last.stop() == 0
    assert resumed >= 2, "too few kills landed inside the split source transaction"
    got = messages(stack, names.table_topic(prefix, schema, "t"))
    assert Counter(k["id"] for k, _, _ in got) == Counter(range(1, BIG_ROWS + 1))
    positions = [h["pgshovel.position"] for _, _, h in got]
    assert positions == sorted(positions)
    records = [v for _, v, _ in messages(stack, names.transactions_topic(prefix))]
    assert [r["type"] for r in records] == ["BEGIN", "END"] and records[1]["event_count"] == BIG_ROWS
    assert_verified(verify(stack, cluster, "big"))


def _slot_confirmed(db, slot: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::int8 FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))
        return cur.fetchone()[0]


def _until(source, items, kind, count: int = 1) -> list:
    """Advance items (of source) until count items of kind have come; the items read but Idle."""
    read = []
    while count:
        item = next(items)
        if isinstance(item, Idle):
            source.wait(0.1)
            continue
        read.append(item)
        count -= isinstance(item, kind)
    return read


def test_waiting_for_a_relay_that_has_not_started_yet(stack, cluster, db, schema, tmp_path, relay):
    """Before its relay's first start a set has no positions topic: the drain check
    (``set status --wait``) waits for the relay rather than failing on the unknown topic."""
    table, _ = make_set(stack, cluster, db, tmp_path, "early", "id int PRIMARY KEY", schema)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} SELECT generate_series(1, 100)")
    outcome: list[BaseException | None] = []

    def wait() -> None:
        try:
            caught_up(stack, cluster, "early", timeout=90)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(3)
    assert not outcome, f"the wait ended before the relay started: {outcome}"
    relay("early")
    waiter.join(120)
    assert outcome == [None]
    assert_verified(verify(stack, cluster, "early"))


def test_a_keepalive_mid_transaction_confirms_nothing_unrelayed(stack, cluster, db, schema, tmp_path, relay):
    """psycopg2 moves its flush position to a keepalive's WAL end once the position confirmed has
    reached the start of the last message read (relay/logical/feedback.py). T2 began before T1,
    which is confirmed; T3 is received and not acknowledged (not in Kafka yet); then the reader
    stalls inside T2 past wal_sender_timeout / 2 (as the loop does while Kafka takes no more
    messages), so the walsender asks with a keepalive carrying a WAL end past T3 unless the source
    replies meanwhile. The slot must never be confirmed past the commit of a transaction not
    acknowledged (T3's commit LSN: the slot skips a transaction whose commit lies below it)."""
    table, _ = make_set(stack, cluster, db, tmp_path, "ka", "id int PRIMARY KEY, pad text", schema)
    first = relay("ka")
    first.wait_for("snapshot done")
    assert first.stop() == 0
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("ka")
    with db.cursor() as cur:
        cur.execute("ALTER SYSTEM SET wal_sender_timeout = '20s'")
        cur.execute("SELECT pg_reload_conf()")
    source = LogicalSource(stack.dsn, record.capture.slot, record.tables)
    big = psycopg2.connect(stack.dsn)
    try:
        items = source.items(Position(0, 0, True, backend=LOGICAL))
        with big.cursor() as cur:  # T2's changes get LSNs below T1's commit
            cur.execute(f"INSERT INTO {table} SELECT g, repeat(md5(g::text), 10) FROM generate_series(1, 60000) g")
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {table} VALUES (0, 't1')")
        t1 = _until(source, items, Commit)[-1]
        source.ack(Position(t1.unit, t1.ordinal, True, backend=LOGICAL))
        deadline = time.monotonic() + 30
        while (acknowledged := _slot_confirmed(db, record.capture.slot)) <= t1.unit:  # T1's end, once processed
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {table} VALUES (-1, 't3')")
        big.commit()
        t3 = _until(source, items, Commit)[-1]
        assert t3.unit < _until(source, items, Change, 1000)[0].unit  # inside T2, which committed after T3
        time.sleep(12)  # stalled: > wal_sender_timeout / 2 since the last reply, < wal_sender_timeout
        _until(source, items, Commit)  # the rest of T2, and a keepalive if the walsender sent one
        time.sleep(1)
        # A keepalive read after T1 and before T3 was written may move it to WAL between them
        # (harmless); at or past T3's commit LSN, T3 would be skipped after a restart: lost.
        assert acknowledged <= _slot_confirmed(db, record.capture.slot) <= t3.unit
        items.close()
    finally:
        source.close()
        big.close()
        with db.cursor() as cur:
            cur.execute("ALTER SYSTEM RESET wal_sender_timeout")
            cur.execute("SELECT pg_reload_conf()")


def test_50mb_value_and_unchanged_toast(stack, cluster, db, schema, tmp_path, relay_factory):
    table, prefix = make_set(stack, cluster, db, tmp_path, "toast", "id int PRIMARY KEY, n int, b bytea, t text",
                             schema)
    r = relay_factory("toast")
    r.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1, 0, decode(repeat(md5('x'), 3276800), 'hex'), "
                    "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 20000) g))")
        cur.execute(f"UPDATE {table} SET n = 1")  # b and t unchanged: TOASTed, not in the WAL's new row
        cur.execute(f"SELECT length(b), md5(b), md5(t) FROM {table}")
        size, b_md5, t_md5 = cur.fetchone()
    assert size == 50 * 1024 * 1024
    caught_up(stack, cluster, "toast", timeout=300)
    got = messages(stack, names.table_topic(prefix, schema, "t"))
    assert [h["pgshovel.op"] for _, _, h in got] == ["c", "u"]
    for _, value, _ in got:
        assert len(value["b"]) == size and hashlib.md5(value["b"]).hexdigest() == b_md5
        assert hashlib.md5(value["t"].encode()).hexdigest() == t_md5
    assert got[1][1]["n"] == 1


def test_replica_identity_is_checked(stack, cluster, db, schema, tmp_path):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".n (id int PRIMARY KEY, v int)')
        cur.execute(f'ALTER TABLE "{schema}".n REPLICA IDENTITY NOTHING')
    # (a NOT NULL TOASTable column needs no FULL: its field is nullable, tests/integration/unchanged_toast.py)
    cfg = tmp_path / "n.yaml"
    cfg.write_text(f"database: {{dsn: '{stack.dsn}'}}\nbackend: logical\ntables: [{{schema: {schema}, name: n}}]\n")
    proc = pgshovel(stack, cluster, "set", "create", "ri", str(cfg), check=False)
    assert proc.returncode != 0 and "replica identity NOTHING" in proc.stderr, proc.stderr
    assert "REPLICA IDENTITY FULL" in proc.stderr and f"{schema}" in proc.stderr
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot_name(cluster, "ri"),))
        assert cur.fetchone()[0] == 0


def test_zero_column_and_dropped_column_tables(stack, cluster, db, schema, tmp_path, relay_factory):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".z ()')
        cur.execute(f'CREATE TABLE "{schema}".d (gone int, id int PRIMARY KEY, n int)')
        cur.execute(f'ALTER TABLE "{schema}".d DROP COLUMN gone')
    prefix = f"zd{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "z", "allow_unkeyed": True},
                                         {"schema": schema, "name": "d"}], backend="logical", topic_prefix=prefix)
    pgshovel(stack, cluster, "set", "create", "zd", str(cfg))
    relay_factory("zd").wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".z DEFAULT VALUES')
        cur.execute("BEGIN")
        cur.execute(f'INSERT INTO "{schema}".d VALUES (1, 10), (2, 20)')
        cur.execute("SELECT txid_current()")
        txid = cur.fetchone()[0]
        cur.execute("COMMIT")
        cur.execute(f'UPDATE "{schema}".d SET n = 11 WHERE id = 1')
        cur.execute(f'DELETE FROM "{schema}".z')
    caught_up(stack, cluster, "zd")
    z = messages(stack, names.table_topic(prefix, schema, "z"))
    assert [(k, v, h["pgshovel.op"]) for k, v, h in z] == [(None, {}, "c"), (None, {}, "d")]  # unkeyed: the row
    d = messages(stack, names.table_topic(prefix, schema, "d"))
    assert [(k["id"], v, h["pgshovel.op"]) for k, v, h in d] == [
        (1, {"id": 1, "n": 10}, "c"), (2, {"id": 2, "n": 20}, "c"), (1, {"id": 1, "n": 11}, "u")]
    assert [h["pgshovel.txid"] for _, _, h in d[:2]] == [str(txid)] * 2  # as txid_current() said
    assert all(len(h["pgshovel.position"]) == 27 for _, _, h in d)


def test_slot_dropped_with_set_and_missing_slot_refused(stack, cluster, db, schema, tmp_path, relay):
    make_set(stack, cluster, db, tmp_path, "sl", "id int PRIMARY KEY, n int", schema)
    slot = slot_name(cluster, "sl")
    first = relay("sl")
    first.wait_for("snapshot done")
    busy = pgshovel(stack, cluster, "set", "drop", "sl", check=False)
    assert busy.returncode != 0 and "in use by a relay" in busy.stderr
    assert first.stop() == 0
    with db.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))  # as a failover would lose it
    second = relay("sl")
    second.wait_for("does not exist, but Kafka holds a position")
    assert "--snapshot" in second.log()
    second.stop(signal.SIGKILL)
    rebootstrap = relay("sl", "--snapshot")
    rebootstrap.wait_for("snapshot done")
    assert rebootstrap.stop() == 0
    dropped = pgshovel(stack, cluster, "set", "drop", "sl")
    assert f"replication slot {slot}" in dropped.stdout
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        assert cur.fetchone()[0] == 0



def test_plugin_refuses_another_record_format(db, cluster):
    """A reader expecting another record format than the plugin writes (a relay and a plugin of
    different versions) stops when decoding starts, with both formats named (sql/decoder/README.rst);
    formats 4 (no truncate messages of partitions asked for: the plugin writes their DELETEs all
    the same) and 3, the same records without packs, are still written (relays one and two
    versions older)."""
    slot = f"fmt_{cluster}"
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgshovel2_decoder')", (slot,))
        try:
            peek = "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, {})"
            with pytest.raises(psycopg2.errors.InvalidParameterValue,
                               match=r'option "format" is required \(this plugin writes record format 5\)'):
                cur.execute(peek.format("'tables', '1:1'"), (slot,))
            with pytest.raises(psycopg2.errors.InvalidParameterValue,
                               match=r'the reader expects record format "2", this plugin writes format 5 '
                                     r'\(or 4, 3\)'):
                cur.execute(peek.format("'format', '2', 'tables', '1:1'"), (slot,))
            for fmt in (RECORD_FORMAT, "4", "3"):
                cur.execute(peek.format("'format', %s, 'tables', '1:1'"), (slot, fmt))
                assert cur.fetchone() == (0,)
        finally:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


@contextmanager
def plugin_slot(db, slot: str, table: str, columns: str) -> Iterator[tuple[Any, int]]:
    """A new table (columns: its column list) and a slot of our plugin, dropped afterwards:
    yields (a cursor of db, the table's OID)."""
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder")
        cur.execute(f"CREATE TABLE {table} ({columns})")
        cur.execute("SELECT %s::regclass::oid", (table,))
        (oid,) = cur.fetchone()
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgshovel2_decoder')", (slot,))
        try:
            yield cur, oid
        finally:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_plugin_writes_a_layout_record_once_per_table_and_layout(db, cluster, schema):
    """A layout record (R) before a table's first change of the session and after a DDL only: not
    before every change (a NOT NULL key column once made every change look like a new layout)."""
    slot = f"lay_{cluster}"
    table = f'"{schema}".lay'
    with plugin_slot(db, slot, table, "id int PRIMARY KEY, n int NOT NULL, s text") as (cur, oid):
        cur.execute(f"INSERT INTO {table} SELECT g, g, 'x' FROM generate_series(1, 5) g")
        cur.execute(f"UPDATE {table} SET n = n + 1")
        cur.execute(f"ALTER TABLE {table} ADD COLUMN w int")
        cur.execute(f"INSERT INTO {table} VALUES (6, 6, 'x', 6)")
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                    "'format', %s, 'tables', %s)", (slot, RECORD_FORMAT, f"{oid}*:1,2,3"))
        kinds = b"".join(rec[:1] for r in cur.fetchall() for rec in records(bytes(r[0])))
    assert kinds == b"BRIIIIIC" + b"BUUUUUC" + b"BRIC", kinds


def test_plugin_writes_a_transactions_records_in_packs(db, cluster, schema):
    """Format 4: a small transaction is one pack (P) ending with its COMMIT; a big one (about 600
    KiB) several, each written once it holds 128 KiB; a heartbeat is a message of its own. The
    records are those format 3 writes one message each, byte for byte (sql/decoder/README.rst)."""
    slot = f"pack_{cluster}"
    table = f'"{schema}".pk'
    with plugin_slot(db, slot, table, "id int PRIMARY KEY, s text") as (cur, oid):
        cur.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        cur.execute(f"INSERT INTO {table} SELECT g, repeat(md5(g::text), 60) FROM generate_series(3, 322) g")
        cur.execute("SELECT pgshovel2_decoder.heartbeat(%s)", (slot,))
        cur.execute(f'CREATE TABLE "{schema}".pk_after (i int)')  # its commit flushes the heartbeat's WAL
        peek = "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'format', %s, 'tables', %s)"
        cur.execute(peek, (slot, RECORD_FORMAT, f"{oid}:1,2"))
        packs = [bytes(r[0]) for r in cur.fetchall()]
        cur.execute(peek, (slot, "3", f"{oid}:1,2"))
        one_by_one = [bytes(r[0]) for r in cur.fetchall()]
    assert [rec for p in packs for rec in records(p)] == one_by_one
    assert b"".join(r[:1] for r in one_by_one) == b"BRIIC" + b"B" + b"I" * 320 + b"C" + b"H", one_by_one[-3:]
    kinds = [p[:1] for p in packs]
    assert kinds[0] == b"P" and records(packs[0])[-1][:1] == b"C" and len(records(packs[0])) == 5
    big = packs[1:-1]
    assert len(big) == 5 and all(k == b"P" for k in kinds[1:-1]) and packs[-1][:1] == b"H"
    assert all(128 * 1024 <= len(p) < 128 * 1024 + 2048 for p in big[:-1])
    assert records(big[-1])[-1][:1] == b"C" and not any(r[:1] == b"C" for p in big[:-1] for r in records(p))


def test_commit_delay_groups_the_transactions_that_keep_coming(stack, cluster, db, schema, tmp_path, relay_factory):
    # 20 one-row transactions 25 ms apart: with the default 10 ms each would end its own Kafka
    # transaction (about 21 position records with the handoff's); with --commit-delay 0.5 a few do
    table, prefix = make_set(stack, cluster, db, tmp_path, "cdelay", "id int PRIMARY KEY", schema)
    relay = relay_factory("cdelay", "--skip-snapshot", "--commit-delay", "0.5")
    relay.wait_for("skipping the initial snapshot")
    with db.cursor() as cur:
        for i in range(20):
            cur.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
            time.sleep(0.025)
    caught_up(stack, cluster, "cdelay")
    got = messages(stack, names.table_topic(prefix, schema, "t"))
    assert sorted(value["id"] for _, value, _ in got) == list(range(20))
    positions = read_topics(stack.bootstrap, [names.positions_topic(prefix)])[names.positions_topic(prefix)]
    assert 2 <= len(positions) <= 6
