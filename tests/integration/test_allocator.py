"""The relay's memory allocator (pgshovel2.cli.allocator) in a real relay process: by default it
re-executes itself under jemalloc, in the same process, and relays; --allocator system keeps malloc."""

import signal
from pathlib import Path

import pytest

from tests.helpers import assert_verified, caught_up, pgshovel, verify, write_config


def mapped(pid: int, name: str) -> bool:
    return name in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("allocator", ["auto", "system"])
def test_relay_runs_under_the_allocator_asked_for(stack, cluster, db, schema, tmp_path, relay_factory, allocator):
    set_name = f"alloc{allocator}"
    table = f'"{schema}".{set_name}'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, s text)")
        cur.execute(f"INSERT INTO {table} SELECT g, md5(g::text) FROM generate_series(1, 2000) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": set_name}], topic_prefix=f"{set_name}{cluster}")
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    relay = relay_factory(set_name, "--allocator", allocator)
    relay.wait_for("memory allocator:")
    jemalloc = allocator == "auto"
    relay.wait_for(f"memory allocator: {'jemalloc' if jemalloc else 'system (--allocator system)'}")
    assert mapped(relay.proc.pid, "libjemalloc") is jemalloc  # the PID the relay was started with
    with db.cursor() as cur:
        cur.execute(f"UPDATE {table} SET s = s || 'x' WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {table} WHERE id % 7 = 0")
    caught_up(stack, cluster, set_name)
    assert_verified(verify(stack, cluster, set_name))
    assert relay.stop(signal.SIGTERM) == 0
