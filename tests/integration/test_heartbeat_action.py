"""A logical set's heartbeat action query (set config ``heartbeat``, Debezium's
heartbeat.action.query) on every server (pg15 with our decoder, stock servers with pgoutput): the
active relay runs it on its interval, its change reaches Kafka, and the slot's confirmed position
moves on while only an uncaptured table is written; a failing query is shown by ``set status``
and does not stop the relay."""

import json
import time

import psycopg2

from pgshovel2 import names
from tests.helpers import caught_up, messages, pgshovel, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


def _slot(stack, set_name: str) -> tuple[int, int]:  # noqa: F811
    """(confirmed_flush_lsn, bytes retained from restart_lsn) of the set's slot, as numbers."""
    conn = psycopg2.connect(stack.admin_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::int8, "
                        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 FROM pg_replication_slots "
                        "WHERE slot_name LIKE %s", (f"pgshovel2\\_{set_name}\\_%",))
            (row,) = cur.fetchall()
    finally:
        conn.close()
    return int(row[0]), int(row[1])


def _wal(db) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
        return int(cur.fetchone()[0])


def _status(stack, cluster: str, set_name: str, done, timeout: float = 60) -> dict:  # noqa: F811
    deadline = time.monotonic() + timeout
    while True:
        status = json.loads(pgshovel(stack, cluster, "set", "status", set_name, "--json").stdout)
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def test_action_query_runs_and_the_slot_advances(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".hb (id int PRIMARY KEY, at timestamptz)')
        cur.execute(f'CREATE TABLE "{schema}".noise (id bigserial PRIMARY KEY, v text)')
    query = (f'INSERT INTO "{schema}".hb VALUES (1, pg_catalog.now()) '
             "ON CONFLICT (id) DO UPDATE SET at = excluded.at")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}, {"schema": schema, "name": "hb"}],
                       backend="logical", topic_prefix=f"hbq{cluster}",
                       heartbeat={"interval": "500ms", "action_query": query})
    pgshovel(stack, cluster, "set", "create", "hbq", str(cfg))
    relay = relay_factory("hbq")
    relay.wait_for("snapshot done")
    start_confirmed, _ = _slot(stack, "hbq")
    wal_start, deadline = _wal(db), time.monotonic() + 15
    while time.monotonic() < deadline:  # only an uncaptured table is written meanwhile
        with db.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}".noise (v) SELECT repeat(\'x\', 200) FROM generate_series(1, 2000)')
    written = _wal(db) - wal_start
    caught_up(stack, cluster, "hbq")
    confirmed, retained = _slot(stack, "hbq")
    assert confirmed > start_confirmed + written // 2, (start_confirmed, confirmed, written)
    deadline = time.monotonic() + 90  # restart_lsn follows at the next running-xacts record (every 15 s)
    while retained >= written // 2 and time.monotonic() < deadline:
        time.sleep(1)
        _, retained = _slot(stack, "hbq")
    assert retained < written // 2, (retained, written)
    beats = [k["id"] for k, _, h in messages(stack, names.table_topic(f"hbq{cluster}", schema, "hb"))
             if h["pgshovel.op"] in ("c", "u")]
    assert len(beats) >= 5 and set(beats) == {1}, beats
    status = _status(stack, cluster, "hbq", lambda s: "heartbeat" in (s.get("connections") or {}))
    assert status["connections"]["heartbeat"]["up"] is True, status.get("connections")
    text = pgshovel(stack, cluster, "set", "status", "hbq").stdout
    assert [line.split()[1] for line in text.splitlines() if "relay-heartbeat:" in line] == ["succeeds"], text
    assert relay.stop() == 0


def test_failing_action_query_is_shown_and_not_fatal(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".hb (id int PRIMARY KEY, at timestamptz)')
        cur.execute(f'ALTER ROLE CURRENT_USER IN DATABASE {db.info.dbname} SET search_path = "{schema}", public')
    try:
        # unqualified: the relay pins search_path to pg_catalog, pg_temp, so hb is not found there
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend="logical",
                           topic_prefix=f"hbf{cluster}",
                           heartbeat={"interval": 0.5, "action_query": "INSERT INTO hb VALUES (1, now())"})
        pgshovel(stack, cluster, "set", "create", "hbf", str(cfg))
        relay = relay_factory("hbf")
        relay.wait_for("snapshot done")
        status = _status(stack, cluster, "hbf", lambda s: "heartbeat" in (s.get("connections") or {}))
    finally:
        with db.cursor() as cur:
            cur.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {db.info.dbname} RESET search_path")
    beat = status["connections"]["heartbeat"]
    assert beat["up"] is False and '"hb" does not exist' in beat["error"], beat
    assert beat["since"] <= beat["error_at"] <= time.time()
    text = pgshovel(stack, cluster, "set", "status", "hbf").stdout
    (line,) = [line for line in text.splitlines() if "relay-heartbeat:" in line]
    assert "FAILS since" in line and '"hb" does not exist' in line, text
    with db.cursor() as cur:  # the relay goes on
        cur.execute(f'INSERT INTO "{schema}".t VALUES (1, \'after\')')
    caught_up(stack, cluster, "hbf")
    got = [k["id"] for k, _, _ in messages(stack, names.table_topic(f"hbf{cluster}", schema, "t"))]
    assert got == [1]
    assert status["relays"]["active"] is not None and relay.proc.poll() is None
    assert relay.stop() == 0
