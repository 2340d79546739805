"""Generated columns on every capture path and server (issue #66): a stored generated column is
carried wherever the path can carry it (trigger capture, our decoder, pgoutput from PostgreSQL 18
with ``publish_generated_columns``) and left out from the start, with a note, where it cannot
(pgoutput before 18): never a column that vanishes mid-stream under a spurious set version. A
virtual generated column (PostgreSQL 18) has no stored value anywhere: left out on every path.
Runs on Debian's PG 15 (all four paths) and each stock server (PL/pgSQL capture and pgoutput)."""

import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


def _paths(server) -> list[tuple[str, dict]]:
    """(backend for write_config, extra config) of every path the server runs."""
    paths = [("trigger", {"capture": "plpgsql"}), ("pgoutput", {})]
    if server.has_our_c:
        paths += [("trigger", {"capture": "c"}), ("logical", {"decoder": "pgshovel2"})]
    return paths


def _create_table(db, table: str, virtual: bool) -> None:
    extra = ", v int GENERATED ALWAYS AS (id * 3) VIRTUAL" if virtual else ""
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, first text, last text, "
                    f"full_name text GENERATED ALWAYS AS (first || ' ' || last) STORED{extra})")
        cur.execute(f"INSERT INTO {table} (id, first, last) VALUES (1, 'Ada', 'Lovelace'), (2, 'Alan', 'Turing')")


def _carries_stored(backend: str, major: int) -> bool:
    return backend != "pgoutput" or major >= 18


def test_generated_columns_on_every_path(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    virtual = stack.major >= 18
    for i, (backend, extra) in enumerate(_paths(stack)):
        name, table = f"gen{i}", f"g{i}"
        qualified = names.qualified(schema, table)
        _create_table(db, qualified, virtual)
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": table}], backend=backend,
                           topic_prefix=f"{name}{cluster}", **extra)
        if backend == "pgoutput" and virtual:  # FULL with a virtual column is refused (test below)
            with db.cursor() as cur:
                cur.execute(f"ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT")
        created = pgshovel(stack, cluster, "set", "create", name, str(cfg)).stdout
        carried = _carries_stored(backend, stack.major)
        assert ('"full_name"' in created and "left out" in created) == (not carried), created
        assert ('"v"' in created and "virtual generated" in created) == virtual, created
        relay = relay_factory(name)
        relay.wait_for("snapshot done")
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {qualified} (id, first, last) VALUES (3, 'Grace', 'Hopper')")
            cur.execute(f"UPDATE {qualified} SET first = 'Augusta' WHERE id = 1")
            cur.execute(f"DELETE FROM {qualified} WHERE id = 2")
        caught_up(stack, cluster, name)
        got = messages(stack, names.table_topic(f"{name}{cluster}", schema, table))
        values = [v for _, v, _ in got if v is not None]
        assert len(values) == 4, (backend, extra, got)  # 2 snapshot rows, the insert, the update
        for value in values:
            assert "v" not in value, (backend, extra, value)
            if carried:
                assert value["full_name"] == f"{value['first']} {value['last']}", (backend, extra, value)
            else:
                assert "full_name" not in value, (backend, extra, value)
        assert {h["pgshovel.version"] for _, _, h in got} == {"1"}, (backend, extra)  # no spurious DDL
        with ClusterStore(stack.zk, cluster) as store:
            assert store.get_set(name)[0].version == 1
        assert_verified(verify(stack, cluster, name))
        assert relay.stop() == 0


@pytest.mark.parametrize("backend", ["trigger", "pgoutput"])
def test_uncarried_generated_column_listed_is_refused(stack, cluster, db, schema, tmp_path, backend):  # noqa: F811
    """A generated column the path cannot carry, listed by name in ``columns``, is refused naming it."""
    virtual = stack.major >= 18
    _create_table(db, names.qualified(schema, "g"), virtual)
    column = "v" if virtual else "full_name"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "g", "columns": ["id", column]}],
                       backend=backend)
    proc = pgshovel(stack, cluster, "set", "create", "genref", str(cfg), check=False)
    refused = virtual or not _carries_stored(backend, stack.major)
    assert (proc.returncode != 0) == refused, proc.stderr
    if refused:
        assert f'column "{column}"' in proc.stderr and "cannot be captured" in proc.stderr, proc.stderr
        with ClusterStore(stack.zk, cluster) as store:
            assert not store.exists("genref")


def test_pgoutput_full_identity_with_virtual_column_is_refused(stack, cluster, db, schema, tmp_path):  # noqa: F811
    """PostgreSQL 18 refuses UPDATE/DELETE of a published table whose REPLICA IDENTITY FULL includes
    a virtual generated column (unpublishable): set create refuses the table, naming why, rather
    than break the application's writes. Before 18 (no virtual columns) FULL is accepted."""
    virtual = stack.major >= 18
    _create_table(db, names.qualified(schema, "g"), virtual)
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "g"}], backend="pgoutput")  # sets FULL
    proc = pgshovel(stack, cluster, "set", "create", "genfull", str(cfg), check=False)
    assert (proc.returncode != 0) == virtual, proc.stderr
    if virtual:
        assert "virtual generated column" in proc.stderr and "REPLICA IDENTITY DEFAULT" in proc.stderr
        with db.cursor() as cur:
            cur.execute(f"UPDATE {names.qualified(schema, 'g')} SET first = 'x'")  # the application still writes
