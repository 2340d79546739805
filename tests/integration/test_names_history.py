"""Operations that read right (#70 items 4 and 5) on the trigger path: ``set inspect --history``
gives each version its own time and what changed in it; ``set upgrade --dry-run`` names what
changed per table (text and --json); a table is named the same way everywhere (``schema.table`` in
a config, short names where unique in the set, the candidates listed where not)."""

import json
import time

import pytest

from pgshovel2.cluster import ClusterStore
from tests.helpers import caught_up, pgshovel, write_config
from tests.integration.ddl_paths import wait_stopped

FMT = "%Y-%m-%d %H:%M:%S"


def utc(seconds: float) -> str:
    return time.strftime(FMT, time.gmtime(seconds)) + " UTC"


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_history_times_and_upgrade_diff(stack, cluster, db, schema, tmp_path, relay_factory, backend):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".products (id int PRIMARY KEY, name text, n int, note text)')
        cur.execute(f'CREATE TABLE "{schema}".orders (id int PRIMARY KEY)')
    v1 = write_config(tmp_path, stack, [{"name": f"{schema}.products", "columns": ["name", "n"]}], backend=backend)
    pgshovel(stack, cluster, "set", "create", "hist", str(v1))
    relay = relay_factory("hist")
    relay.wait_for("snapshot done")
    caught_up(stack, cluster, "hist")
    assert relay.stop() == 0
    with db.cursor() as cur:  # while no relay runs: the stored version still has n integer
        cur.execute(f'ALTER TABLE "{schema}".products ALTER COLUMN n TYPE bigint')
        cur.execute(f"INSERT INTO \"{schema}\".products VALUES (1, 'a', 2, 'b')")  # a logical set sees it here
    v2 = write_config(tmp_path, stack, [{"name": f"{schema}.products", "columns": ["n", "note"]},
                                        f"{schema}.orders"], backend=backend)
    dry = pgshovel(stack, cluster, "set", "upgrade", "hist", str(v2), "--dry-run").stdout
    products = f'"{schema}"."products"'
    assert (f"changed table {products}; columns added: note; columns removed: name; "
            "columns retyped: n: integer -> bigint") in dry, dry
    assert f'added table "{schema}"."orders"' in dry, dry
    plan = json.loads(pgshovel(stack, cluster, "set", "upgrade", "hist", str(v2), "--dry-run", "--json").stdout)
    assert plan["dry_run"] and (plan["from_version"], plan["to_version"]) == (1, 2)
    assert {"table": products, "kind": "changed", "columns_added": ["note"], "columns_removed": ["name"],
            "columns_retyped": ["n: integer -> bigint"]} in plan["tables"], plan

    relay = relay_factory("hist")  # meets the ALTER: version 2 (ddl)
    caught_up(stack, cluster, "hist")
    pgshovel(stack, cluster, "set", "upgrade", "hist", str(v2), "--no-snapshot")  # version 3
    caught_up(stack, cluster, "hist")
    assert relay.stop() == 0

    with ClusterStore(stack.zk, cluster) as store:
        assert store.history("hist") == [1, 2, 3]
        records = {v: store.get_version("hist", v) for v in (1, 2, 3)}
        path2 = f"{store.set_path('hist')}/history/{2:010d}"
        data, stat = store.zk.get(path2)
        # version 2 as a record written before every version had its own time: no upgraded_at, and
        # (so a fallback to it shows) a create time long ago
        legacy = json.loads(data)
        del legacy["upgraded_at"]
        legacy["created_at"] = 978307200.0  # 2001-01-01
        store.zk.set(path2, json.dumps(legacy).encode())
    lines = pgshovel(stack, cluster, "set", "inspect", "hist", "--history").stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["1", "2", "3"], lines
    assert f"  {utc(records[1].created_at)}  create  " in lines[0]
    assert f"  {utc(stat.ctime / 1000)} (znode)  ddl (ALTER TABLE" in lines[1], lines[1]
    assert "2001-01-01" not in lines[1]
    assert f"changes: changed table {products}; columns retyped: n: integer -> bigint" in lines[1], lines[1]
    assert f"  {utc(records[3].upgraded_at)}  upgrade  " in lines[2], lines[2]
    assert (f"changes: added table \"{schema}\".\"orders\"; changed table {products}; columns added: note; "
            "columns removed: name") in lines[2], lines[2]
    history = json.loads(pgshovel(stack, cluster, "set", "inspect", "hist", "--history", "--json").stdout)
    assert [(v["version"], v["kind"], v["at_from"]) for v in history] == [
        (1, "create", "created_at"), (2, "ddl", "znode ctime"), (3, "upgrade", "upgraded_at")]
    assert history[2]["at"] == records[3].upgraded_at


def test_table_names_everywhere(stack, cluster, db, schema, tmp_path, relay_factory):
    other = f"{schema}_b"
    with db.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{other}"')
        for s in (schema, other):
            cur.execute(f'CREATE TABLE "{s}".orders (id int PRIMARY KEY, n numeric(12,2))')
        cur.execute(f'CREATE TABLE "{schema}"."my.items" (id int PRIMARY KEY)')
    try:
        names_in_every_command(stack, cluster, db, schema, other, tmp_path, relay_factory)
    finally:
        with db.cursor() as cur:
            cur.execute(f'DROP SCHEMA "{other}" CASCADE')


def names_in_every_command(stack, cluster, db, schema, other, tmp_path, relay_factory):
    cfg = write_config(tmp_path, stack, [f"{schema}.orders", {"name": f"{other}.orders"},
                                         f'{schema}."my.items"'])
    pgshovel(stack, cluster, "set", "create", "nm", str(cfg))
    inspect = pgshovel(stack, cluster, "set", "inspect", "nm").stdout
    for tag in (f'{schema}.orders', f'{other}.orders', f'{schema}.my.items'):
        assert f"table {tag} " in inspect, inspect
    relay = relay_factory("nm")
    relay.wait_for("snapshot done")

    def refused(*args: str) -> str:
        proc = pgshovel(stack, cluster, *args, check=False)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        return proc.stderr

    both = f"{schema}.orders, {other}.orders"
    err = refused("set", "snapshot", "nm", "--table", "orders")
    assert f"table 'orders' is ambiguous in set 'nm': it could be {both}" in err, err
    err = refused("set", "snapshot", "nm", "--table", "nope")
    assert "table 'nope' is not a table of set 'nm'; its tables: " in err and f'{schema}."my.items"' in err, err
    out = pgshovel(stack, cluster, "set", "snapshot", "nm", "--table", "my.items", "--table",
                   f"{other}.orders").stdout
    assert f'requested: "{schema}"."my.items", "{other}"."orders"' in out, out
    cancel = pgshovel(stack, cluster, "set", "snapshot", "nm", "--cancel", check=False)  # two empty tables:
    assert cancel.returncode == 0 or "is done already" in cancel.stderr, cancel.stderr  # it may be done already

    err = refused("tail", "nm", "--table", "orders")
    assert f"it could be {both}" in err, err
    pgshovel(stack, cluster, "tail", "nm", "--table", f'{schema}."my.items"', "--from-beginning")

    with db.cursor() as cur:  # another scale (other decimal bytes): the relay waits for the operator's decision
        cur.execute(f'ALTER TABLE "{schema}".orders ALTER COLUMN n TYPE numeric(12,3)')
        cur.execute(f'INSERT INTO "{schema}".orders VALUES (1, 1.125)')
    stop = wait_stopped(stack, cluster, "nm", relay)
    assert stop["table"] == f'"{schema}"."orders"', stop
    err = refused("set", "accept-ddl", "nm", "orders")
    assert f"it could be {both}" in err and "nothing written" in err, err
    out = pgshovel(stack, cluster, "set", "accept-ddl", "nm", f'"{schema}"."orders"').stdout
    assert "SCHEMA_CHANGED" in out, out
    caught_up(stack, cluster, "nm")
    assert relay.stop() == 0
