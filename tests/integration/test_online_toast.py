"""An online snapshot of a table with TOASTed values, logical backend, REPLICA IDENTITY DEFAULT:
UPDATEs that leave the TOASTed value unchanged (null + pgshovel.unchanged) of keys inside a chunk's
window (held open at the failpoint online_chunk_read) and ahead of it. A consumer that starts at
the table's SNAPSHOT_BEGIN (not at the beginning of the topics) and applies everything after it
with RowState (the snapshot marks handed in) rebuilds the table exactly, TOASTed values included:
the relay re-reads such keys at the chunk's emission (docs/internals.rst, "Online snapshots")."""

import hashlib
import time
from pathlib import Path

import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import RowState, SetReader
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config
from tests.online import snapshot_begin_offsets, wait_state

BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 160))"  # 5 kB, random hex


@pytest.mark.parametrize("backend, key", [("logical", "int"), ("pgoutput", "int"), ("logical", "numeric")])
def test_online_snapshot_keeps_toasted_values_of_partial_updates(stack, cluster, db, schema, tmp_path, backend, key):
    """key: the id column's type; numeric is re-read by the chunk's key range (not looked up by key)."""
    t, set_name = f'"{schema}".t', f"otoast{backend[:3]}{key[:3]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id {key} PRIMARY KEY, n int, big text)")
        cur.execute(f"INSERT INTO {t} SELECT g, 0, {BIG} FROM generate_series(1, 8) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend=backend, encoding="json",
                       topic_prefix=f"{set_name}{cluster}")
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY DEFAULT")
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    held = tmp_path / "failpoints"
    held.mkdir()
    relay = RelayProcess(stack, cluster, set_name, log_path=tmp_path / "relay.log",
                         extra_env={"PGSHOVEL2_FAILPOINTS": f"online_chunk_read=pause:{held}"})
    relay.wait_for("snapshot done")
    pgshovel(stack, cluster, "set", "snapshot", set_name, "--table", f"{schema}.t", "--chunk-size", "3")
    # chunk 0 reads nothing (it places SNAPSHOT_BEGIN), then keys 1-3, 4-6, 7-8 (+ what is inserted);
    # each held between its read and HIGH
    in_window = {1: ["UPDATE {t} SET n = 1 WHERE id = 1"],           # before SNAPSHOT_BEGIN
                 2: ["UPDATE {t} SET n = 1 WHERE id = 2",
                     "UPDATE {t} SET n = 7, big = 'full' WHERE id = 3",  # a full change: left to the stream
                     "UPDATE {t} SET n = 1 WHERE id = 5"],           # ahead of its chunk
                 3: ["UPDATE {t} SET n = 2 WHERE id = 4",
                     "UPDATE {t} SET n = 2 WHERE id = 7",            # a consumer has no row of 7 yet
                     "UPDATE {t} SET n = 3 WHERE id = 6", "UPDATE {t} SET big = 'small', n = 4 WHERE id = 6"],
                 4: ["UPDATE {t} SET n = 3 WHERE id = 8",
                     "INSERT INTO {t} VALUES (9, 0, " + BIG + ")", "UPDATE {t} SET n = 3 WHERE id = 9"]}
    for hit, statements in in_window.items():
        _wait_reached(held, hit, relay)
        with db.cursor() as cur:
            for statement in statements:
                cur.execute(statement.format(t=t))
        (held / f"online_chunk_read.{hit}.go").touch()
    wait_state(stack, cluster, set_name, "done")
    with db.cursor() as cur:
        cur.execute(f"UPDATE {t} SET n = 10 WHERE id = 2")   # after the snapshot: as always
    caught_up(stack, cluster, set_name, timeout=120)
    assert _rebuilt_from_snapshot_begin(stack, cluster, set_name, schema) == _rows(db, t)
    assert "re-read" in relay.log()
    assert relay.stop() == 0


def _wait_reached(held: Path, hit: int, relay: RelayProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (held / f"online_chunk_read.{hit}.reached").exists():
        assert relay.proc.poll() is None and time.monotonic() < deadline, \
            f"chunk {hit} never read:\n{relay.log()}"
        time.sleep(0.05)


def _rows(conn, table: str) -> dict[int, tuple]:
    """id -> (n, md5(big), length(big))."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT id::int, n, md5(big), length(big) FROM {table}")
        return {r[0]: r[1:] for r in cur.fetchall()}


def _rebuilt_from_snapshot_begin(stack, cluster: str, set_name: str, schema: str) -> dict[int, tuple]:
    """The table as RowState rebuilds it from the table's SNAPSHOT_BEGIN on (marks handed in)."""
    prefix = f"{set_name}{cluster}"
    start = snapshot_begin_offsets(stack, names.transactions_topic(prefix), names.table_topic(prefix, schema, "t"))
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry, start_offsets=start)
    state = RowState()
    with reader:
        marks = reader.reassembler.snapshot_marks
        state.apply_all(reader.transactions(until_caught_up=True), marks)
        state.apply_marks(marks)  # caught up: every row before the SNAPSHOT_END was applied
    assert [m.kind for m in marks] == ["SNAPSHOT_BEGIN", "SNAPSHOT_END"] and not state.incomplete
    (table,) = state.tables.values()
    return {int(v["id"]): (v["n"], hashlib.md5(v["big"].encode()).hexdigest(), len(v["big"])) for v in table.values()}
