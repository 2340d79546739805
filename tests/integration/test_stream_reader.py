"""The native reader of a replication stream (native/src/stream/copy.rs, relay/logical/stream_reader.py) on a
real slot: the same messages as psycopg2's read_message, keepalives that ask for a reply
answered (and the connection dropped by the walsender when they are not), nothing confirmed by
reading, and an error -- not None forever -- when the connection is closed or the stream ends."""

import select
import time
import uuid

import psycopg2
import pytest
from psycopg2.extras import LogicalReplicationConnection

from pgshovel2.codec import native
from pgshovel2.relay.logical.stream_reader import stream_reader
from tests.helpers import drop_slot

pytestmark = pytest.mark.skipif(getattr(native.module(), "CopyReader", None) is None,
                                reason="the native module is not installed")


@pytest.fixture
def slot(stack, db, schema):
    """(slot, publication, table): a pgoutput slot of a fresh table, dropped afterwards."""
    name = f"reader_{uuid.uuid4().hex[:8]}"
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, pad text)")
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE {table}")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    yield name, name, table
    drop_slot(stack.dsn, name)
    with db.cursor() as cur:
        cur.execute(f"DROP PUBLICATION {name}")


def start(stack, slot: str, publication: str, options: str | None = None):
    """A replication connection and its cursor, streaming the slot from its confirmed position."""
    conn = psycopg2.connect(stack.dsn, connection_factory=LogicalReplicationConnection, options=options)
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False,
                          options={"proto_version": "1", "publication_names": publication})
    return conn, cur


def read_until(read, cur, commits: int, timeout: float = 30) -> list[tuple[bytes, int]]:
    """(payload, data_start) of the messages read until commits Commit messages came."""
    got, seen, deadline = [], 0, time.monotonic() + timeout
    while seen < commits:
        assert time.monotonic() < deadline, f"{seen} of {commits} commits read"
        msg = read()
        if msg is None:
            select.select([cur], [], [], 0.5)
            continue
        got.append((bytes(msg.payload), msg.data_start))
        seen += msg.payload[:1] == b"C"
    return got


def read_until_broken(read, cur, timeout: float = 10) -> None:
    """Reads (waiting on the socket between reads) until read raises the broken stream's error."""
    with pytest.raises(psycopg2.OperationalError, match="replication stream"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            read()
            select.select([cur], [], [], 0.2)


def confirmed(db, slot: str) -> str:
    with db.cursor() as cur:
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        return cur.fetchone()[0]


def test_reads_what_psycopg2_reads(stack, db, slot):
    name, publication, table = slot
    with db.cursor() as cur:
        for i in range(20):
            cur.execute(f"INSERT INTO {table} VALUES ({i}, 'x')")
        cur.execute(f"INSERT INTO {table} SELECT g, repeat(md5(g::text), 200) FROM generate_series(100, 400) g")
        cur.execute(f"UPDATE {table} SET pad = repeat('y', 50000) WHERE id < 5")  # messages above libpq's 16 kB
        cur.execute(f"DELETE FROM {table} WHERE id >= 300")
    expected_commits = 23
    conn, cur = start(stack, name, publication)
    try:
        by_psycopg2 = read_until(cur.read_message, cur, expected_commits)
    finally:
        conn.close()
    conn, cur = start(stack, name, publication)  # nothing confirmed: the same stream again
    try:
        by_native = read_until(stream_reader(conn, cur), cur, expected_commits)
    finally:
        conn.close()
    assert [m[0][:1] for m in by_native].count(b"U") == 5
    assert by_native == by_psycopg2


def test_keepalives_asking_for_a_reply_are_answered_and_confirm_nothing(stack, db, slot):
    """wal_sender_timeout 2 s: the walsender asks for a reply after 1 s without one and ends the
    connection after 2. The reader answers through its feedback callable (which sends only what
    psycopg2 was told was confirmed: nothing here); without an answer the stream breaks."""
    name, publication, table = slot
    before = confirmed(db, name)
    conn, cur = start(stack, name, publication, options="-c wal_sender_timeout=2s")
    replies = []

    def reply() -> None:
        replies.append(time.monotonic())
        cur.send_feedback(force=True)

    reader = native.module().CopyReader(psycopg2._psycopg.__file__, conn, psycopg2.OperationalError, reply)
    try:
        with db.cursor() as dbcur:
            dbcur.execute(f"INSERT INTO {table} VALUES (1, 'a')")
        assert read_until(reader, cur, 1)
        deadline = time.monotonic() + 6  # three wal_sender_timeouts
        while time.monotonic() < deadline:
            assert reader() is None
            select.select([cur], [], [], 0.2)
        assert len(replies) >= 2
        assert reader.wal_end > 0
    finally:
        conn.close()
    assert confirmed(db, name) == before

    conn, cur = start(stack, name, publication, options="-c wal_sender_timeout=2s")
    silent = native.module().CopyReader(psycopg2._psycopg.__file__, conn, psycopg2.OperationalError, lambda: None)
    try:
        read_until_broken(silent, cur)
    finally:
        conn.close()


def test_a_closed_connection_or_an_ended_stream_raises(stack, db, slot):
    name, publication, _ = slot
    conn, cur = start(stack, name, publication)
    reader = stream_reader(conn, cur)
    conn.close()
    with pytest.raises(psycopg2.OperationalError, match="closed"):
        reader()

    conn, cur = start(stack, name, publication)
    reader = stream_reader(conn, cur)
    try:
        with db.cursor() as dbcur:
            dbcur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s",
                          (name,))
        read_until_broken(reader, cur)
    finally:
        conn.close()
