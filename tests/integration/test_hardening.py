"""Hostile names, shared topic prefixes, stop requests during outages, a set dropped under its
relay, set status as an operator reads it, and every config problem reported at once
(issue 14, items 5, 6, 7, 8, 11, 13). Each of these failed on 3ab5a84."""

import json
import re
import signal
import socket
import time

import psycopg2
import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.setrecord import queue_name
from tests.helpers import RelayProcess, caught_up, messages, pgshovel, write_config


def _table(db, schema: str, name: str = "t", extra: str = "") -> dict:
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".{name} (id int PRIMARY KEY, v text{extra})')
        cur.execute(f'INSERT INTO "{schema}".{name} SELECT g, g::text FROM generate_series(1, 10) g')
    return {"schema": schema, "name": name}


def _znodes(stack) -> set[str]:
    with ClusterStore(stack.zk, "default") as store:
        out, todo = set(), ["/pgshovel2"]
        while todo:
            path = todo.pop()
            out.add(path)
            todo += [f"{path}/{c}" for c in store.zk.get_children(path)] if store.zk.exists(path) else []
    return out


@pytest.mark.parametrize("args", [
    ("set", "inspect", "../x"), ("set", "status", "S/history"), ("set", "drop", "a/../b"),
    ("--cluster", "c/../d", "set", "list"), ("set", "inspect", "x" * 41)])
def test_hostile_set_and_cluster_names_are_refused_before_zookeeper(stack, cluster, args):
    before = _znodes(stack)
    proc = pgshovel(stack, cluster, *args, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error:" in proc.stderr and ("set name" in proc.stderr or "cluster name" in proc.stderr), proc.stderr
    # nothing created (an earlier test's SIGKILLed relay may still lose its ephemeral nodes meanwhile)
    assert not _znodes(stack) - before


def test_relay_of_a_path_like_set_name_writes_nothing(stack, cluster, db, schema, tmp_path):
    cfg = write_config(tmp_path, stack, [_table(db, schema)], encoding="json")
    pgshovel(stack, cluster, "set", "create", "S", str(cfg))
    before = _znodes(stack)
    relay = RelayProcess(stack, cluster, "S/history", log_path=tmp_path / "hostile.log")
    assert relay.proc.wait(60) == 1
    assert "set name" in relay.log() and "Traceback" not in relay.log()
    assert _znodes(stack) == before
    assert "version 1" in pgshovel(stack, cluster, "set", "inspect", "S", "--history").stdout


def test_a_topic_prefix_belongs_to_one_set(stack, cluster, db, schema, tmp_path):
    table = _table(db, schema)
    other = _table(db, schema, "u")
    first = write_config(tmp_path, stack, [table], encoding="json", topic_prefix="shared")
    dry = pgshovel(stack, cluster, "set", "create", "one", str(first), "--dry-run").stdout
    assert "would create" in dry and "topic shared.transactions" in dry and f"topic shared.{schema}.t" in dry
    assert "dry run: nothing was changed" in dry
    with ClusterStore(stack.zk, cluster) as store:
        assert not store.exists("one")
    pgshovel(stack, cluster, "set", "create", "one", str(first))
    inspect = pgshovel(stack, cluster, "set", "inspect", "one").stdout
    assert f"topic shared.{schema}.t" in inspect and "shared.positions" in inspect
    for name, extra in (("two", {"topic_prefix": "shared"}), ("shared", {})):  # explicit, or by set name
        cfg = write_config(tmp_path, stack, [other], encoding="json", **extra)
        proc = pgshovel(stack, cluster, "set", "create", name, str(cfg), check=False)
        assert proc.returncode == 1 and "would write the topics of set 'one'" in proc.stderr, proc.stderr
        with ClusterStore(stack.zk, cluster) as store:
            assert not store.exists(name)
        with db.cursor() as cur:  # the database side was rolled back too
            cur.execute("SELECT count(*) FROM pgq.queue WHERE queue_name = %s", (f"pgshovel2.{cluster}.{name}",))
            assert cur.fetchone()[0] == 0
    pgshovel(stack, cluster, "set", "drop", "one")
    pgshovel(stack, cluster, "set", "create", "two", str(write_config(tmp_path, stack, [other], encoding="json",
                                                                      topic_prefix="shared")))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_ends_a_relay_waiting_for_an_unreachable_registry(stack, cluster, db, schema, tmp_path):
    cfg = write_config(tmp_path, stack, [_table(db, schema)])  # avro
    pgshovel(stack, cluster, "set", "create", "noreg", str(cfg))
    relay = RelayProcess(stack, cluster, "noreg", "--schema-registry",
                         f"http://127.0.0.1:{_closed_port()}/apis/ccompat/v7", log_path=tmp_path / "noreg.log")
    relay.wait_for("unreachable")
    assert relay.stop(signal.SIGTERM, timeout=15) == 0, relay.log()
    assert "stopped while waiting for the schema registry" in relay.log()


def test_dropping_a_set_under_its_trigger_relay_stops_it_cleanly(stack, cluster, db, schema, tmp_path):
    table = _table(db, schema)
    cfg = write_config(tmp_path, stack, [table], encoding="json")
    pgshovel(stack, cluster, "set", "create", "gone", str(cfg))
    relay = RelayProcess(stack, cluster, "gone", log_path=tmp_path / "gone.log")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, g::text FROM generate_series(11, 5000) g')
    pgshovel(stack, cluster, "set", "drop", "gone")
    assert relay.proc.wait(60) == 1
    log = relay.log()
    assert "set 'gone' was dropped" in log and "Traceback" not in log, log


def _status(stack, cluster: str, name: str, *args: str) -> tuple[str, dict]:
    text = pgshovel(stack, cluster, "set", "status", name, *args).stdout
    return text, json.loads(pgshovel(stack, cluster, "set", "status", name, "--json").stdout)


def test_status_of_idle_sets_of_both_backends(stack, cluster, db, schema, tmp_path, backend):
    table = _table(db, schema)
    cfg = write_config(tmp_path, stack, [table], encoding="json", backend=backend)
    created = pgshovel(stack, cluster, "set", "create", "st", str(cfg)).stdout
    # the test server has no max_slot_wal_keep_size: set create says what that means for the slot
    assert ("note: max_slot_wal_keep_size is -1 (no limit)" in created) == (backend == "logical"), created
    relay = RelayProcess(stack, cluster, "st", log_path=tmp_path / "st.log")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".t SET v = v || \'!\'')
    caught_up(stack, cluster, "st")
    started = time.monotonic()
    text, info = _status(stack, cluster, "st", "--wait")
    waited = time.monotonic() - started
    assert waited < 9, f"set status --wait on a caught-up set took {waited:.1f}s"  # 3ab5a84: >= 10 s
    if backend == "logical":
        assert "slot pgshovel2_st_" in text and "queue None" not in text and "commit LSN " in text
        assert "/" in info["position"]["text"] and "after its confirmed position" in text
        assert "the slot retains " in text and "flush lag " in text and "no relay streaming" not in text
    else:
        assert "queue pgshovel2." in text and "committed at:     tick " in text
        assert "caught up (0 events queued" in text, text
    assert info["last_error"] is None
    relay.stop()
    if backend == "logical":  # no walsender: its lag is unknown, not 0
        text, info = _status(stack, cluster, "st")
        assert "no relay streaming from the slot" in text and "lag unknown" in text, text


def test_status_counts_events_no_tick_holds_yet(stack, cluster, db, schema, tmp_path):
    """With no ticker ticking the queue (pgqd's ticks paused, no relay), PgQ's pending_events says 0
    for changes queued after the last tick: set status counts them and does not say caught up."""
    table = _table(db, schema)
    pgshovel(stack, cluster, "set", "create", "un", str(write_config(tmp_path, stack, [table], encoding="json")))
    queue = queue_name(cluster, "un")
    relay = RelayProcess(stack, cluster, "un", log_path=tmp_path / "un.log")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:  # a first event relayed: the queue's event sequence has been used
        cur.execute(f'INSERT INTO "{schema}".t VALUES (11, \'first\')')
    caught_up(stack, cluster, "un")
    relay.stop()
    with db.cursor() as cur:
        cur.execute("UPDATE pgq.queue SET queue_ticker_paused = true WHERE queue_name = %s", (queue,))
        cur.execute(f'INSERT INTO "{schema}".t SELECT g, \'new\' FROM generate_series(12, 14) g')
    text, info = _status(stack, cluster, "un")
    assert info["lag"]["pending_events"] == 0 and info["lag"]["unticked_events"] == 3, info["lag"]
    assert "not caught up: 3 events queued since the last tick" in text and "caught up (" not in text, text
    with db.cursor() as cur:
        cur.execute("UPDATE pgq.queue SET queue_ticker_paused = false WHERE queue_name = %s", (queue,))
    relay = RelayProcess(stack, cluster, "un", log_path=tmp_path / "un2.log")
    caught_up(stack, cluster, "un")
    text, info = _status(stack, cluster, "un")
    assert info["lag"]["unticked_events"] == 0 and "caught up (0 events queued" in text, text
    relay.stop()


def test_status_marks_an_error_recovered_from(stack, cluster, db, schema, tmp_path):
    cfg = write_config(tmp_path, stack, [_table(db, schema)], encoding="json")
    pgshovel(stack, cluster, "set", "create", "rec", str(cfg))
    relay = RelayProcess(stack, cluster, "rec", log_path=tmp_path / "rec.log")
    relay.wait_for("snapshot done")
    conn = psycopg2.connect(stack.dsn)  # cut the relay off the database: an interruption it retries
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND application_name NOT LIKE 'pgqd%'")
    relay.wait_for("interrupted")
    with conn.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".t SET v = \'after\'')
    conn.close()
    caught_up(stack, cluster, "rec")
    text, info = _status(stack, cluster, "rec")
    assert info["last_error"] is not None and info["last_error"]["recovered"], info
    assert "(recovered, the relay committed since)" in text
    relay.stop()


def test_every_table_needing_replica_identity_is_named_at_once(stack, cluster, db, schema, tmp_path):
    tables = [_table(db, schema, name) for name in ("a", "b", "c")]
    with db.cursor() as cur:  # an identity that logs no old key: no UPDATE or DELETE could be relayed
        for name in "abc":
            cur.execute(f'ALTER TABLE "{schema}".{name} REPLICA IDENTITY NOTHING')
    cfg = write_config(tmp_path, stack, tables, backend="trigger", envelope="debezium")  # identity kept
    text = cfg.read_text().replace("backend: trigger", "backend: logical")
    cfg.write_text(text)
    proc = pgshovel(stack, cluster, "set", "create", "ri", str(cfg), check=False)
    assert proc.returncode == 1
    for i, name in enumerate("abc"):
        assert f"tables[{i}]: " in proc.stderr and names.qualified(schema, name) in proc.stderr, proc.stderr
    assert "3 problems" in proc.stderr and "REPLICA IDENTITY FULL" in proc.stderr


def test_every_missing_table_and_column_is_named_at_once(stack, cluster, db, schema, tmp_path):
    _table(db, schema)
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "nope"},
                                         {"schema": schema, "name": "t", "columns": ["id", "missing"]},
                                         {"schema": schema, "name": "also_nope"}], encoding="json")
    proc = pgshovel(stack, cluster, "set", "create", "miss", str(cfg), check=False)
    assert proc.returncode == 1, proc.stderr
    assert "tables[0].name" in proc.stderr and "tables[1].columns[1]" in proc.stderr \
        and "tables[2].name" in proc.stderr and "3 problems" in proc.stderr, proc.stderr


def test_a_change_that_cannot_be_encoded_is_skipped_only_when_asked(stack, cluster, db, schema, tmp_path):
    """numeric(p,s) NaN has no Avro decimal form (docs/wire.rst): the relay stops naming the change's
    position, stops again on restart, and leaves out exactly that change once an operator asks."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".m (id int PRIMARY KEY, amount numeric(10,2))')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "m"}], topic_prefix=f"m{cluster}")
    pgshovel(stack, cluster, "set", "create", "m", str(cfg))
    relay = RelayProcess(stack, cluster, "m", log_path=tmp_path / "m1.log")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".m VALUES (1, 1.5)')
        cur.execute(f'INSERT INTO "{schema}".m VALUES (2, \'NaN\'), (3, 3.5)')
    assert relay.proc.wait(60) == 1
    position = re.search(r"is at position (\S+):", relay.log()).group(1)
    assert f"pgshovel set skip m --position {position}" in relay.log()
    again = RelayProcess(stack, cluster, "m", log_path=tmp_path / "m2.log")  # nothing dropped by itself
    assert again.proc.wait(60) == 1 and position in again.log()
    out = pgshovel(stack, cluster, "set", "skip", "m", "--position", position, "--reason", "numeric NaN").stdout
    assert position in out
    relay = RelayProcess(stack, cluster, "m", log_path=tmp_path / "m3.log")
    relay.wait_for("leaving out the change")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".m VALUES (4, 4.5)')
    caught_up(stack, cluster, "m")
    got = sorted(k["id"] for k, _, h in messages(stack, f"m{cluster}.{schema}.m") if h["pgshovel.op"] == "c")
    assert got == [1, 3, 4]
    status = pgshovel(stack, cluster, "set", "status", "m").stdout
    assert f"skip {position}: left out: I of txid" in status and "numeric NaN" in status, status
    relay.stop()
