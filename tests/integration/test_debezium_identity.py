"""envelope: debezium on tables with REPLICA IDENTITY DEFAULT (and USING INDEX), both decoders, as
Debezium 3.4's PostgreSQL connector writes them (docs/wire.rst, "Envelope debezium"): an UPDATE
keeping its key has ``before`` null; a DELETE's, and a key change's, ``before`` holds the identity's
columns, the others null; an UPDATE's unchanged TOASTed values are Debezium's
``unavailable.value.placeholder`` (default, or a given text) or null (``unchanged_toast: header``),
with the ``pgshovel.unchanged`` header either way. The set's consumers (set verify, the consumer
library's RowState; replicate takes row sets only) rebuild the table from these events. NOTHING, and an unkeyed
DEFAULT table, are still refused with the reason and the fix."""

import base64
import hashlib
import json

import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import RowState, SetReader
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config

P = "__debezium_unavailable_value"
BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 16384))"  # 512 KiB, random
BIG_INTS = "(SELECT array_agg((random() * 2e9 - 1e9)::int) FROM generate_series(1, 100000))"
COLUMNS = ["id", "n", "s", "big", "bin", "arr", "ints"]
UNCHANGED = ["big", "bin", "arr", "ints"]


def _create(db, t: str) -> None:
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int NOT NULL, s text NOT NULL, big text NOT NULL, "
                    "bin bytea, arr text[], ints int[])")
        cur.execute(f"INSERT INTO {t} VALUES (1, 1, 'one', {BIG}, decode({BIG}, 'hex'), ARRAY[{BIG}], {BIG_INTS})")


def _identity(db, t: str, identity: str) -> None:
    with db.cursor() as cur:
        if identity == "USING INDEX":
            cur.execute(f"CREATE UNIQUE INDEX ON {t} (id, n)")
            cur.execute("SELECT quote_ident(c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                        "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary", (t,))
            cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY USING INDEX {cur.fetchone()[0]}")
        else:
            cur.execute(f"ALTER TABLE {t} REPLICA IDENTITY {identity}")


def _placeholders(debezium: dict, encoding: str) -> dict | None:
    """The after-values of UNCHANGED in an UPDATE leaving them unchanged, as the decoded event holds them."""
    if debezium.get("unchanged_toast") == "header":
        return None
    text = debezium.get("unavailable_value_placeholder", P)
    raw = text.encode()
    return {"big": text, "bin": raw if encoding == "avro" else base64.b64encode(raw).decode(),
            "arr": [text], "ints": list(raw)}


CASES = [("pgshovel2", "json", {}, "DEFAULT"),
         ("pgshovel2", "avro", {"unchanged_toast": "header"}, "DEFAULT"),
         ("pgoutput", "json", {"unavailable_value_placeholder": "<unavailable>"}, "USING INDEX"),
         ("pgoutput", "avro", {}, "DEFAULT"),
         ("pgoutput", "json", {"schemas": False, "unchanged_toast": "header"}, "DEFAULT")]


@pytest.mark.parametrize(("decoder", "encoding", "debezium", "identity"), CASES)
def test_debezium_default_identity(stack, cluster, db, schema, tmp_path, relay_factory,
                                   decoder, encoding, debezium, identity):
    t = f'"{schema}".t'
    _create(db, t)
    set_name = f"dbzri{decoder[:4]}{encoding}"
    prefix = f"{set_name}{cluster}"
    extra = {"debezium": debezium} if debezium else {}
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding=encoding, backend="logical",
                       decoder=decoder, envelope="debezium", topic_prefix=prefix, **extra)
    _identity(db, t, identity)  # write_config set FULL
    created = pgshovel(stack, cluster, "set", "create", set_name, str(cfg)).stdout
    assert "a DELETE's before holds the key only" in created, created
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} VALUES (2, 2, 'two', {BIG}, decode({BIG}, 'hex'), ARRAY[{BIG}], {BIG_INTS})")
        cur.execute(f"UPDATE {t} SET s = 'TWO' WHERE id = 2")     # big, bin, arr, ints unchanged
        cur.execute(f"UPDATE {t} SET id = 20 WHERE id = 2")       # key change, the same unchanged
        cur.execute(f"DELETE FROM {t} WHERE id = 1")
        cur.execute(f"INSERT INTO {t} VALUES (3, 3, 'three', 'small', NULL, NULL, NULL)")
        cur.execute(f"UPDATE {t} SET big = {BIG}, n = 30 WHERE id = 3")
    caught_up(stack, cluster, set_name, timeout=180)
    got = messages(stack, names.table_topic(prefix, schema, "t"))
    _check_events(got, db, t, _placeholders(debezium, encoding), identity)
    assert_verified(verify(stack, cluster, set_name))
    source = _rows(db, t)
    assert {k: v[:3] for k, v in source.items()} == _state_rows(stack, cluster, set_name)
    assert relay.stop() == 0


def _state_rows(stack, cluster: str, set_name: str) -> dict:
    """id -> (n, s, md5(big)) of the table as the consumer library's RowState rebuilds it."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, set_name, stack.bootstrap, stack.registry)
    state = RowState()
    with reader:
        state.apply_all(reader.transactions(until_caught_up=True))
    (table,) = state.tables.values()
    return {v["id"]: (v["n"], v["s"], hashlib.md5(v["big"].encode()).hexdigest()) for v in table.values()}


def _rows(conn, t: str) -> dict:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, n, s, md5(big), md5(bin), md5(arr::text), md5(ints::text) FROM {t}")
        return {r[0]: r[1:] for r in cur.fetchall()}


def _check_events(got: list, db, t: str, placeholders: dict | None, identity: str) -> None:
    """Each event's op, key, before and after as Debezium writes them (big values by their md5)."""
    events = [(k, v["op"] if v else None, v and v["before"], v and v["after"], h.get("pgshovel.unchanged"))
              for k, v, h in got]
    ops = [(k["id"] if isinstance(k, dict) and "id" in k else k, op) for k, op, _, _, _ in events]
    assert ops == [(1, "r"), (2, "c"), (2, "u"), (2, "d"), (2, None), (20, "c"), (1, "d"), (1, None),
                   (3, "c"), (3, "u")], ops
    ident = {"id": None} if identity == "DEFAULT" else {"id": None, "n": None}
    nulls = dict.fromkeys(COLUMNS)
    header = json.dumps(UNCHANGED, separators=(",", ":"))
    unchanged = placeholders or dict.fromkeys(UNCHANGED)
    _, _, before, after, h = events[2]  # UPDATE keeping the key: no old row
    assert before is None and h == header
    assert after == {**after, **unchanged, "id": 2, "n": 2, "s": "TWO"}
    _, _, before, after, h = events[3]  # key change: the old identity only
    assert before == {**nulls, **dict.fromkeys(ident, 2)} and after is None and h is None
    _, _, before, after, h = events[5]
    assert before is None and h == header
    assert after == {**after, **unchanged, "id": 20, "n": 2, "s": "TWO"}
    _, _, before, after, h = events[6]  # DELETE: the identity only
    assert before == {**nulls, **dict.fromkeys(ident, 1)} and after is None and h is None
    _, _, before, after, h = events[9]  # big logged (changed), the others null, not unchanged
    old_ident = None if identity == "DEFAULT" else {**nulls, "id": 3, "n": 3}  # n of the index changed
    assert before == old_ident and h is None
    assert {c: after[c] for c in ("id", "n", "s", "bin", "arr", "ints")} == {
        "id": 3, "n": 30, "s": "three", "bin": None, "arr": None, "ints": None}
    with db.cursor() as cur:
        cur.execute(f"SELECT big FROM {t} WHERE id = 3")
        assert after["big"] == cur.fetchone()[0]


@pytest.mark.parametrize("decoder", ["pgshovel2", "pgoutput"])
def test_debezium_refuses_what_cannot_work(stack, cluster, db, schema, tmp_path, decoder):
    """NOTHING (no old key at all) and an unkeyed table without FULL: set create names each table, the
    reason and the fix, and creates nothing."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".k (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".u (v text)')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "k"},
                                         {"schema": schema, "name": "u", "allow_unkeyed": True}],
                       encoding="json", backend="logical", decoder=decoder, envelope="debezium",
                       topic_prefix=f"dbzno{cluster}")
    with db.cursor() as cur:
        cur.execute(f'ALTER TABLE "{schema}".k REPLICA IDENTITY NOTHING')
        cur.execute(f'ALTER TABLE "{schema}".u REPLICA IDENTITY DEFAULT')
    done = pgshovel(stack, cluster, "set", "create", "dbzno", str(cfg), check=False)
    assert done.returncode != 0
    err = done.stderr
    assert f'"{schema}"."k"' in err and f'"{schema}"."u"' in err, err
    assert "its key (id) is not in what the WAL logs" in err and "replica identity NOTHING" in err, err
    assert "no key (allow_unkeyed)" in err and "REPLICA IDENTITY FULL" in err, err
    assert "debezium envelope needs every old row" not in err, err


@pytest.mark.parametrize("decoder", ["pgshovel2", "pgoutput"])
def test_debezium_default_identity_added_column(stack, cluster, db, schema, tmp_path, relay_factory, decoder):
    """A NOT NULL fixed-length column added while relayed is optional in the new value schema too
    (pgshovel2.relay.logical.relation_layout): a DELETE's before holds it as null, and the relay goes on.
    (No set verify here: it decodes a debezium Avro topic with the last layout's schema only.)"""
    t = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO {t} VALUES (1, 'one')")
    set_name = f"dbzadd{decoder[:4]}"
    prefix = f"{set_name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding="avro", backend="logical",
                       decoder=decoder, envelope="debezium", topic_prefix=prefix)
    _identity(db, t, "DEFAULT")
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay = relay_factory(set_name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {t} ADD COLUMN m int NOT NULL DEFAULT 7")
        cur.execute(f"INSERT INTO {t} VALUES (2, 'two', 8)")
        cur.execute(f"DELETE FROM {t} WHERE id = 2")
        cur.execute(f"DELETE FROM {t} WHERE id = 1")
    caught_up(stack, cluster, set_name, timeout=180)
    got = [(v["op"], v["before"], v["after"]) for _, v, _ in messages(stack, names.table_topic(prefix, schema, "t"))
           if v is not None]
    assert got[-3:] == [("c", None, {"id": 2, "v": "two", "m": 8}),
                        ("d", {"id": 2, "v": None, "m": None}, None),
                        ("d", {"id": 1, "v": None, "m": None}, None)], got
    assert relay.stop() == 0
