"""Column controls per type (#71): a table of many types relayed twice on each path, by a set without
controls and by one hashing or masking every column but the key. Each hashed value is the SHA-256 of
the salt and the plain set's JSON value text (the documented input), in the initial snapshot, in
changes and in an online snapshot; each masked value is the mask. A set upgrade that adds a control
applies it from the upgrade's position on."""

import hashlib
import json

import pytest

from pgshovel2 import names
from pgshovel2.ops.verify import read_topics
from tests.helpers import caught_up, messages, pgshovel, until, write_config

SALT = "salt-per-type"
TYPES = """
CREATE TABLE {t} (
  id int8 PRIMARY KEY, b bool, i2 int2, f8 float8, n numeric(10,2), nu numeric, t text, by bytea, u uuid,
  d date, ts timestamp, tz timestamptz, tm time, iv interval, j jsonb, ia int[], ta text[], c char(3)
)"""
ROW = ("(%s, true, 7, 1.5, 12345678.91, 0.1000000000000000000000000001, 'héllo 🐘', '\\x00ff00', "
       "'6ecd8c99-4036-403d-bf84-cf8400f67836', '2024-02-29', '2024-02-29 12:34:56.789012', "
       "'2024-02-29 12:34:56.789012+02', '23:59:59.999999', '1 mon 2 days 00:00:03', '{\"a\": [1, null]}', "
       "'{1,NULL,3}', '{\"x y\",NULL}', 'ab')")
NULLS = "(%s, NULL, NULL, 'NaN', -0.01, NULL, NULL, NULL, NULL, 'infinity', '-infinity', 'infinity', NULL, NULL, " \
        "NULL, NULL, NULL, NULL)"
MASKED = ("t", "ia", "iv")
PATHS = [("trigger", {"capture": "c"}), ("trigger", {"capture": "plpgsql"}), ("logical", {"decoder": "pgshovel2"}),
         ("pgoutput", {})]


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _rows(stack, topic: str) -> list[dict]:
    return [v for _, v, _ in messages(stack, topic) if v is not None]


@pytest.mark.parametrize("path, extra", PATHS, ids=[f"{p}-{e.get('capture') or e.get('decoder') or 'pgoutput'}"
                                                     for p, e in PATHS])
def test_every_type_hashes_its_json_text(stack, cluster, db, schema, tmp_path, relay_factory, monkeypatch,
                                         path, extra):
    monkeypatch.setenv("PGSHOVEL2_TEST_SALT", SALT)
    qualified = names.qualified(schema, "typed")
    with db.cursor() as cur:
        cur.execute(TYPES.format(t=qualified))
        cur.execute(f"INSERT INTO {qualified} VALUES {ROW}, {NULLS}", (1, 2))
    columns = ["b", "i2", "f8", "n", "nu", "t", "by", "u", "d", "ts", "tz", "tm", "iv", "j", "ia", "ta", "c"]
    controls = {c: {"mask": 3} if c in MASKED else {"hash": "env:PGSHOVEL2_TEST_SALT"} for c in columns}
    sets = {}
    for name, table in (("plain", {}), ("hashed", {"controls": controls})):
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "typed", **table}], backend=path,
                           encoding="json", topic_prefix=f"{name}{cluster}", **extra)
        pgshovel(stack, cluster, "set", "create", name, str(cfg))
        sets[name] = relay_factory(name)
    for relay in sets.values():
        relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {qualified} VALUES {ROW}", (3,))
        cur.execute(f"UPDATE {qualified} SET t = 'changed', f8 = 2.25 WHERE id = 1")
    pgshovel(stack, cluster, "set", "snapshot", "hashed", "--chunk-size", "2")
    until(lambda: "done" in pgshovel(stack, cluster, "set", "snapshot", "hashed", "--status").stdout,
          "the online snapshot", 120, step=1)
    for name in sets:
        caught_up(stack, cluster, name)
    plain = _rows(stack, names.table_topic(f"plain{cluster}", schema, "typed"))
    hashed = _rows(stack, names.table_topic(f"hashed{cluster}", schema, "typed"))
    assert len(hashed) == len(plain) + 3  # the online snapshot's 3 rows
    last = {row["id"]: row for row in plain}  # what the online snapshot read: each row as it is now
    pairs = list(zip(plain, hashed[:len(plain)], strict=True)) + [(last[row["id"]], row) for row in hashed[len(plain):]]
    for before, after in pairs:
        assert before["id"] == after["id"], (before, after)
        for column in columns:
            want = None if before[column] is None else "***" if column in MASKED else \
                hashlib.sha256((SALT + _text(before[column])).encode()).hexdigest()
            assert after[column] == want, (path, column, before[column], after[column])
    for relay in sets.values():
        assert relay.stop() == 0


def test_an_upgrade_adding_a_control_applies_it_from_its_position(stack, cluster, db, schema, tmp_path,
                                                                   relay_factory):
    qualified = names.qualified(schema, "up")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {qualified} (id int PRIMARY KEY, ssn text)")
        cur.execute(f"INSERT INTO {qualified} VALUES (1, '111-11-1111')")
    table = {"schema": schema, "name": "up"}
    cfg = write_config(tmp_path, stack, [table], encoding="json", topic_prefix=f"up{cluster}")
    pgshovel(stack, cluster, "set", "create", "up", str(cfg))
    relay = relay_factory("up")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {qualified} VALUES (2, '222-22-2222')")
    new = write_config(tmp_path, stack, [{**table, "controls": {"ssn": {"mask": 4}}}], encoding="json",
                       topic_prefix=f"up{cluster}")
    plan = pgshovel(stack, cluster, "set", "upgrade", "up", str(new), "--dry-run").stdout
    assert "ssn: none -> mask 4" in plan, plan
    pgshovel(stack, cluster, "set", "upgrade", "up", str(new), "--no-snapshot")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {qualified} VALUES (3, '333-33-3333')")
        cur.execute(f"UPDATE {qualified} SET ssn = '444-44-4444' WHERE id = 1")
    caught_up(stack, cluster, "up")
    got = [(v["id"], v["ssn"]) for _, v, _ in messages(stack, names.table_topic(f"up{cluster}", schema, "up"))
           if v is not None]
    assert got == [(1, "111-11-1111"), (2, "222-22-2222"), (3, "****"), (1, "****")], got
    assert relay.stop() == 0


def test_an_avro_upgrade_that_would_retype_a_column_is_refused(stack, cluster, db, schema, tmp_path):
    qualified = names.qualified(schema, "av")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {qualified} (id int PRIMARY KEY, age int, note text)")
    table = {"schema": schema, "name": "av"}
    cfg = write_config(tmp_path, stack, [table], topic_prefix=f"av{cluster}")
    pgshovel(stack, cluster, "set", "create", "av", str(cfg))
    retype = write_config(tmp_path, stack, [{**table, "controls": {"age": {"mask": 2}}}], topic_prefix=f"av{cluster}")
    out = pgshovel(stack, cluster, "set", "upgrade", "av", str(retype), check=False)
    assert out.returncode != 0 and "tables[0].controls.age" in out.stderr and "BACKWARD" in out.stderr, out.stderr
    text = write_config(tmp_path, stack, [{**table, "controls": {"note": {"mask": 2}}}], topic_prefix=f"av{cluster}")
    assert "note: none -> mask 2" in pgshovel(stack, cluster, "set", "upgrade", "av", str(text)).stdout


@pytest.mark.parametrize("path", ["trigger", "pgoutput"])
def test_a_control_follows_a_renamed_column(stack, cluster, db, schema, tmp_path, relay_factory, path):
    qualified = names.qualified(schema, f"rn{path[0]}")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {qualified} (id int PRIMARY KEY, ssn text)")
        cur.execute(f"INSERT INTO {qualified} VALUES (1, '111-11-1111')")
    name = f"rn{path[0]}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": name, "controls": {"ssn": {"mask": 4}}}],
                       backend=path, encoding="json", topic_prefix=f"{name}{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    relay = relay_factory(name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE {qualified} RENAME COLUMN ssn TO social")
        cur.execute(f"INSERT INTO {qualified} VALUES (2, '222-22-2222')")
    caught_up(stack, cluster, name)
    got = [v for _, v, _ in messages(stack, names.table_topic(f"{name}{cluster}", schema, name)) if v is not None]
    assert [(v["id"], v.get("social", v.get("ssn"))) for v in got] == [(1, "****"), (2, "****")], got
    raw = read_topics(stack.bootstrap, [names.table_topic(f"{name}{cluster}", schema, name)])
    assert not [v for msgs in raw.values() for _, v, _ in msgs if v and b"-22-" in v]
    assert relay.stop() == 0
