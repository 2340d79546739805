"""CPU per message of reading a pgoutput stream the way the logical source reads it (its reader,
psycopg2's ``read_message`` or the native one, until it gives None, then wait on the socket), with
nothing else done per message: what the relay pays before it decodes anything. Two figures: the
whole loop's CPU per message (this reader keeps up with the walsender, so it waits and wakes for
most messages, which a busy relay does not), and the CPU inside the read_message calls that gave
a message (the thread's CPU clock read around each call, less what reading that clock costs):
the relay's cost when the stream is ahead of it, as in a drain. The stream: the
``mixed`` table's inserts in transactions of ``--per-transaction`` rows (2: a Begin, two Inserts
and a Commit, two messages a change), written before the slot is read. Needs the bench stack's
PostgreSQL (``make stack-up``).

    .venv/bin/python -m bench.experiments.pgoutput_read [--changes 100000] [--per-transaction 2]
        [--readers native,psycopg2]

Each reader reads the same stream from the slot's start (nothing is confirmed). The native reader
is called from Python here, a call per message; inside the relay's scans it is not.
"""

import argparse
import select
import time

import psycopg2
import psycopg2.extras

from bench.peer import workloads
from bench.peer.common import DSN, prepare, save_result
from pgshovel2.relay.logical.stream_reader import stream_reader

SLOT, PUBLICATION, TABLE = "bench_read_slot", "bench_read_pub", "public.bench_read"


def setup(cur, changes: int, per_transaction: int) -> None:
    """A slot, a publication of TABLE and changes rows written after the slot."""
    teardown(cur)
    cur.execute(f"CREATE TABLE {TABLE} ({workloads.MIXED.columns})")
    cur.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}")
    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
    workloads.fill(cur, workloads.MIXED, TABLE, changes, per_transaction)


def teardown(cur) -> None:
    cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (SLOT,))
    cur.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
    cur.execute(f"DROP TABLE IF EXISTS {TABLE}")


def read(messages: int, reader: str) -> dict:
    """Reads messages messages of the slot with reader (``native``: relay/logical/stream_reader.py's;
    ``psycopg2``: read_message): this thread's CPU µs per message, bytes per message."""
    conn = psycopg2.connect(DSN, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.start_replication(slot_name=SLOT, decode=False,
                              options={"proto_version": "1", "publication_names": PUBLICATION})
        read_message = stream_reader(conn, cur) if reader == "native" else cur.read_message
        got, size, in_calls = 0, 0, 0
        clock = time.thread_time_ns
        started = time.thread_time()
        while got < messages:
            before = clock()
            msg = read_message()
            if msg is None:
                select.select([cur], [], [], 1.0)
                continue
            in_calls += clock() - before
            got += 1
            size += len(msg.payload)
            _ = msg.data_start  # the source reads it too (native/src/stream/message.rs: Seen::of)
        used = time.thread_time() - started
        return {"messages": got, "loop_us_per_message": round(used * 1e6 / got, 3),
                "read_us_per_message": round((in_calls / got - clock_cost()) / 1e3, 3),
                "bytes_per_message": size // got}
    finally:
        conn.close()


def clock_cost(rounds: int = 200_000) -> float:
    """ns of thread CPU clock between two readings of it taken one after the other."""
    clock = time.thread_time_ns
    total = 0
    for _ in range(rounds):
        a = clock()
        total += clock() - a
    return total / rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=2)
    parser.add_argument("--readers", default="native,psycopg2")
    args = parser.parse_args()
    cur = prepare()
    setup(cur, args.changes, args.per_transaction)
    txns = -(-args.changes // args.per_transaction)
    result: dict = {"changes": args.changes, "per_transaction": args.per_transaction}
    try:
        for reader in args.readers.split(","):
            got = read(args.changes + 2 * txns, reader)
            got["read_us_per_change"] = round(got["read_us_per_message"] * got["messages"] / args.changes, 3)
            result[reader] = got
            print(reader, got)
    finally:
        teardown(cur)
    print(f"results: {save_result('pgoutput-read', result)}")


if __name__ == "__main__":
    main()
