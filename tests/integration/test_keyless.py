"""Tables without a key (``allow_unkeyed``, issue #66): every change is representable or set create
refuses. A keyless table with duplicate rows (two equal rows, one deleted; one of two equal rows
updated; a no-op UPDATE; INSERT, UPDATE and DELETE of one row in one transaction; TRUNCATE) on every
capture path of every server (trigger with C and PL/pgSQL capture, logical with our decoder and
pgoutput at REPLICA IDENTITY FULL; stock servers: the PL/pgSQL capture and pgoutput), both
envelopes and both encodings: the topic holds each DELETE's row and each UPDATE's old row, the
consumer library's RowState, ``set verify`` and ``replicate`` (bootstrapped by copy and from
Kafka) rebuild the table as the multiset it is. A logical set refuses a keyless table at another
replica identity; ``set upgrade`` gives an older trigger set's keyless tables their old rows, and an
UPDATE queued before without its old row stops the relay, naming the table, the position and the
fix, until ``set skip`` (our decoder's: tests/integration/test_keyless_stop.py)."""

import json
import re
import subprocess
from collections import Counter

import psycopg2
import pytest
from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.backends import plcapture
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.consumer import RowState, SetReader
from tests.helpers import (
    BIN,
    RelayProcess,
    assert_verified,
    caught_up,
    cli_env,
    messages,
    pgshovel,
    verify,
    write_config,
)
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)

SEED = "('a', 1, NULL, '{}'), ('a', 1, NULL, '{}'), ('b', 2, 'x', '[1, 2]')"
ONE = "ctid = (SELECT ctid FROM {t} WHERE msg = %s LIMIT 1)"  # one of the equal rows


def _paths(server) -> list[tuple[str, dict]]:
    """(backend for write_config, extra config) of every path the server runs."""
    paths = [("trigger", {"capture": "plpgsql"}), ("pgoutput", {})]
    if server.has_our_c:
        paths += [("trigger", {"capture": "c"}), ("logical", {"decoder": "pgshovel2"})]
    return paths


def create(db, t: str) -> None:
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (msg text, n int, note text, j json)")  # json: no equality operator
        cur.execute(f"INSERT INTO {t} VALUES {SEED}")


def _workload(db, t: str) -> None:
    """The changes (each statement its own transaction unless in one BEGIN ... COMMIT)."""
    with db.cursor() as cur:
        cur.execute(f"""INSERT INTO {t} VALUES ('c', 3, NULL, '{{"x": 1}}'), ('c', 3, NULL, '{{"x": 1}}'),
                                              ('d', 4, 'n', '[1, 2]')""")
        cur.execute(f"DELETE FROM {t} WHERE {ONE.format(t=t)}", ("a",))          # one of two equal rows
        cur.execute(f"UPDATE {t} SET n = 30 WHERE {ONE.format(t=t)}", ("c",))   # one of two equal rows
        cur.execute(f"UPDATE {t} SET n = n WHERE msg = 'b'")                     # changes nothing
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {t} VALUES ('e', 5, NULL, NULL)")
        cur.execute(f"UPDATE {t} SET msg = 'E', note = 'moved' WHERE msg = 'e'")
        cur.execute(f"DELETE FROM {t} WHERE msg = 'd'")
        cur.execute("COMMIT")
        before_truncate = _source(db, t)
        cur.execute(f"TRUNCATE {t}")
        cur.execute(f"INSERT INTO {t} VALUES {SEED}, ('c', 3, NULL, '{{\"x\": 1}}'), ('c', 3, NULL, '{{\"x\": 1}}'),"
                    " (NULL, NULL, NULL, NULL)")
        cur.execute(f"DELETE FROM {t} WHERE {ONE.format(t=t)}", ("a",))
        cur.execute(f"UPDATE {t} SET note = 'changed' WHERE {ONE.format(t=t)}", ("c",))
    assert before_truncate == Counter({("a", 1, None, ()): 1, ("b", 2, "x", (1, 2)): 1, ("c", 3, None, (("x", 1),)): 1,
                                       ("c", 30, None, (("x", 1),)): 1, ("E", 5, "moved", None): 1})


def _source(conn, t: str) -> Counter:
    """The table's rows as a multiset of (msg, n, note, j parsed)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT msg, n, note, j::text FROM {t}")
        return Counter((m, n, note, _hashable(json.loads(j)) if j is not None else None)
                       for m, n, note, j in cur.fetchall())


def _hashable(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _row(value: dict) -> tuple:
    """A decoded row (Avro: j as its text; JSON: the value itself, or a JsonValue) as _source has it."""
    j = value["j"]
    if isinstance(j, JsonValue):
        j = j.value
    elif isinstance(j, str):
        j = json.loads(j)
    return value["msg"], value["n"], value["note"], _hashable(j) if j is not None else None


def _consumer_rows(stack, cluster: str, set_name: str) -> Counter:  # noqa: F811
    """The table as the consumer library's RowState rebuilds it from the beginning of the topics."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry)
    state = RowState()
    with reader:
        state.apply_all(reader.transactions(until_caught_up=True))
    (rows,) = state.tables.values()
    return Counter(_row(v) for v in rows.values())


def _replicate(stack, cluster: str, set_name: str, target, mode: str) -> None:  # noqa: F811
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", set_name, "--target", target.dsn, "--bootstrap",
                           mode, "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr


def _check_topic(got: list, encoding: str) -> None:
    """The row envelope's messages: null keys; the DELETE of one 'a' is d with its row; the UPDATE of
    one 'c' is d of the old row then u of the new at one position; nothing else without a value."""
    assert all(k is None and v is not None for k, v, _ in got), got
    ops = [(h["pgshovel.op"], _row(v)[:2], h["pgshovel.position"]) for _, v, h in got]
    deleted = [o for o in ops if o[0] == "d" and o[1] == ("a", 1)]
    assert len(deleted) == 2, ops  # before and after the TRUNCATE
    moved = [i for i, o in enumerate(ops) if o[0] == "u" and o[1] == ("c", 30)]
    assert len(moved) == 1, ops
    old = [o for o in ops if o[0] == "d" and o[1] == ("c", 3) and o[2] == ops[moved[0]][2]]
    assert len(old) == 1, (encoding, ops)


def _check_tail(stack, cluster: str, set_name: str, t: str) -> None:  # noqa: F811
    """pgshovel tail shows the deleted row of a DELETE (JSON lines and the pretty form)."""
    lines = [json.loads(line) for line in
             pgshovel(stack, cluster, "tail", set_name, "--from-beginning", "--format", "json").stdout.splitlines()]
    deleted = [(c["key"], c["value"]["msg"], c["value"]["n"]) for c in lines if c["op"] == "d"]
    assert (None, "a", 1) in deleted and (None, "c", 3) in deleted, lines
    pretty = pgshovel(stack, cluster, "tail", set_name, "--from-beginning").stdout
    assert f"  d {t.replace(chr(34), '')} {{msg: 'a', n: 1, note: NULL" in pretty, pretty


@pytest.mark.parametrize("envelope", ["row", "debezium"])
def test_keyless_table_on_every_path(stack, cluster, db, schema, tmp_path, relay_factory, target,  # noqa: F811
                                     envelope):
    for i, (backend, extra) in enumerate(_paths(stack)):
        name, t = f"kl{i}", names.qualified(schema, f"k{i}")
        encoding = ("avro", "json")[(i + (envelope == "debezium")) % 2]
        create(db, t)
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": f"k{i}", "allow_unkeyed": True}],
                           encoding=encoding, backend=backend, topic_prefix=f"{name}{cluster}", envelope=envelope,
                           **extra)
        pgshovel(stack, cluster, "set", "create", name, str(cfg))
        relay = relay_factory(name)
        relay.wait_for("snapshot done")
        _workload(db, t)
        caught_up(stack, cluster, name)
        where = (backend, extra, encoding, envelope)
        if envelope == "row":
            _check_topic(messages(stack, names.table_topic(f"{name}{cluster}", schema, f"k{i}")), encoding)
            _check_tail(stack, cluster, name, t)
        source = _source(db, t)
        assert source == Counter({("a", 1, None, ()): 1, ("b", 2, "x", (1, 2)): 1, ("c", 3, None, (("x", 1),)): 1,
                                  ("c", 3, "changed", (("x", 1),)): 1, (None, None, None, None): 1})
        assert _consumer_rows(stack, cluster, name) == source, where
        assert_verified(verify(stack, cluster, name))
        if envelope == "row":
            _replicate(stack, cluster, name, target, ("copy", "kafka")[i % 2])
            tconn = psycopg2.connect(target.dsn)
            try:
                assert _source(tconn, t) == source, where
            finally:
                tconn.close()
        assert relay.stop() == 0, where


def test_logical_set_refuses_a_keyless_table_without_full_identity(stack, cluster, db, schema, tmp_path):  # noqa: F811
    decoders = ["pgoutput", "pgshovel2"] if stack.has_our_c else ["pgoutput"]
    for i, (decoder, identity) in enumerate((d, ident) for d in decoders for ident in ("DEFAULT", "NOTHING")):
        t = names.qualified(schema, f"r{i}")
        create(db, t)
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": f"r{i}", "allow_unkeyed": True}],
                           backend="logical", decoder=decoder)
        with db.cursor() as cur:
            cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY {identity}")
        proc = pgshovel(stack, cluster, "set", "create", "klref", str(cfg), check=False)
        assert proc.returncode != 0, (decoder, identity, proc.stdout)
        assert "tables[0]" in proc.stderr and "no key (allow_unkeyed)" in proc.stderr, proc.stderr
        assert f"replica identity is {identity}" in proc.stderr, proc.stderr
        assert f"ALTER TABLE {t} REPLICA IDENTITY FULL" in proc.stderr, proc.stderr
        with ClusterStore(stack.zk, cluster) as store:
            assert not store.exists("klref")


def stopped_at(relay: RelayProcess, table: str, what: str) -> str:
    """The position the relay stopped at (exit 1) for table's change without its old row."""
    assert relay.proc.wait(60) == 1, relay.log()
    log = relay.log()
    assert f"table {table} has no key (allow_unkeyed) and this {what}" in log, log
    return re.search(r"is at position (\S+):", log).group(1)


def _old_style_trigger(db, t: str, trigger: str) -> None:
    """Re-create the set's ROW capture trigger on t in the mode an older pgshovel2 gave a keyless
    table: no old row on UPDATE (mode without ``,before``), for the C or the PL/pgSQL capture."""
    with db.cursor() as cur:
        cur.execute("SELECT tgargs, tgfoid::regproc::text FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname = %s",
                    (t, trigger))
        args, function = cur.fetchone()
        queue, tag, attnums, keys, mode = bytes(args).split(b"\0")[:5]
        assert mode.decode().endswith(",before"), mode
        old = mode.decode().removesuffix(",before")
        if function != "pgshovel2.capture":
            function = "pgshovel2_pl." + plcapture.register(cur, queue.decode(), tag.decode(), attnums.decode(),
                                                           keys.decode(), old)
        cur.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(trigger), sql.SQL(t)))
        cur.execute(sql.SQL("CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW EXECUTE FUNCTION "
                            "{}({}, {}, {}, {}, {})").format(
            sql.Identifier(trigger), sql.SQL(t), sql.SQL(function), *map(sql.Literal, (
                queue.decode(), tag.decode(), attnums.decode(), keys.decode(), old))))


def test_set_upgrade_gives_an_older_trigger_sets_keyless_table_its_old_rows(stack, cluster, db, schema,  # noqa: F811
                                                                            tmp_path):
    captures = ["plpgsql", "c"] if stack.has_our_c else ["plpgsql"]
    for i, capture in enumerate(captures):
        name, t = f"klu{i}", names.qualified(schema, f"u{i}")
        create(db, t)
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": f"u{i}", "allow_unkeyed": True}],
                           capture=capture, topic_prefix=f"{name}{cluster}", encoding="json")
        pgshovel(stack, cluster, "set", "create", name, str(cfg))
        with ClusterStore(stack.zk, cluster) as store:
            trigger = store.get_set(name)[0].capture.trigger
        _old_style_trigger(db, t, trigger)
        relay = RelayProcess(stack, cluster, name, log_path=tmp_path / f"{name}-1.log")
        relay.wait_for("snapshot done")
        with db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET n = 10 WHERE msg = 'b'")  # queued without its old row
        position = stopped_at(relay, t, "UPDATE came without its old row")
        assert f"pgshovel set upgrade {name} CONFIG" in relay.log()
        plan = pgshovel(stack, cluster, "set", "upgrade", name, str(cfg)).stdout
        assert "capture every UPDATE's old row" in plan and f"replace on {t}" in plan, plan
        assert "already matches" in pgshovel(stack, cluster, "set", "upgrade", name, str(cfg)).stdout
        pgshovel(stack, cluster, "set", "skip", name, "--position", position, "--reason", "queued before the upgrade")
        with db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET n = 20 WHERE msg = 'b'")
        relay = RelayProcess(stack, cluster, name, log_path=tmp_path / f"{name}-2.log")
        relay.wait_for("leaving out the change")
        caught_up(stack, cluster, name)
        got = messages(stack, names.table_topic(f"{name}{cluster}", schema, f"u{i}"))
        assert [(h["pgshovel.op"], v["n"], h["pgshovel.version"]) for _, v, h in got if h["pgshovel.op"] != "r"] == [
            ("d", 10, "2"), ("u", 20, "2")], got
        assert relay.stop() == 0
