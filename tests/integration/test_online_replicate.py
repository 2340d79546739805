"""``pgshovel replicate`` follows a set while an online snapshot (``pgshovel set snapshot``) of one
of its tables runs under concurrent writers: op ``r`` rows arrive between stream transactions and
SNAPSHOT_BEGIN/END records on the transactions topic; the target ends equal to the source."""

import subprocess
import time

import pytest

from tests.helpers import BIN, caught_up, cli_env, pgshovel, write_config
from tests.integration.test_online_snapshot import ROWS, make_set
from tests.online import start_writers, stop_writers, wait_state


def rows(conn, table: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        return cur.fetchall()


def assert_same_rows(db, target, table: str) -> None:
    """table has the same rows on the source (db) and the replica target."""
    tconn = target.connect()
    src, dst = rows(db, table), rows(tconn, table)
    tconn.close()
    assert len(src) == len(dst), (len(src), len(dst))
    assert src == dst, next((a, b) for a, b in zip(src, dst, strict=True) if a != b)


@pytest.mark.parametrize("backend", ["trigger", "logical"])
@pytest.mark.parametrize("mode", ["copy", "kafka"])
def test_replicate_through_an_online_snapshot(stack, cluster, db, schema, tmp_path, relay_factory, target,
                                              backend, mode):
    table = make_set(stack, cluster, db, schema, tmp_path, "rpo", backend)
    relay = relay_factory("rpo")
    relay.wait_for("snapshot done")
    stop, threads = start_writers(stack.dsn, table, ROWS)
    log = open(tmp_path / "replicate.log", "a")
    proc = subprocess.Popen([str(BIN / "pgshovel"), "replicate", "rpo", "--target", target.dsn, "--bootstrap",
                             mode, "--batch-changes", "300"], env=cli_env(stack, cluster), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        time.sleep(1)
        pgshovel(stack, cluster, "set", "snapshot", "rpo", "--chunk-size", "200")
        try:
            wait_state(stack, cluster, "rpo", "done")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nrelay log:\n{relay.log()[-3000:]}") from None
        time.sleep(0.5)
        stop_writers(stop, threads)
        caught_up(stack, cluster, "rpo")
        assert proc.poll() is None, (tmp_path / "replicate.log").read_text()
        proc.terminate()
        assert proc.wait(60) == 0, (tmp_path / "replicate.log").read_text()
    finally:
        stop_writers(stop, threads)  # again after a failure: stopped threads join at once
        if proc.poll() is None:  # a failed test leaves no replicate process behind
            proc.kill()
            proc.wait()
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", "rpo", "--target", target.dsn,
                           "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_rows(db, target, table)
    assert relay.stop() == 0


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_a_table_added_after_a_copy_bootstrap_gets_its_rows_on_the_replica(stack, cluster, db, schema, tmp_path,
                                                                           relay_factory, target, backend):
    """A copy bootstrap skips the snapshot rows of the tables it copied; a table the set gains later
    by ``set upgrade`` gets its old rows only from the upgrade's online snapshot, which replicate
    must apply (it skipped them all before)."""
    make_set(stack, cluster, db, schema, tmp_path, "rpa", backend)
    added = f'"{schema}".added'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {added} (id int PRIMARY KEY, n int, s text)")
        cur.execute(f"INSERT INTO {added} SELECT g, 0, 'old' FROM generate_series(1, %s) g", (ROWS,))
    relay = relay_factory("rpa")
    relay.wait_for("snapshot done")
    env = cli_env(stack, cluster)
    boot = subprocess.run([str(BIN / "pgshovel"), "replicate", "rpa", "--target", target.dsn, "--bootstrap", "copy",
                           "--until-caught-up"], env=env, capture_output=True, text=True, timeout=300)
    assert boot.returncode == 0, boot.stderr
    stop, threads = start_writers(stack.dsn, added, ROWS)
    try:
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "rpa"}, {"schema": schema, "name": "added"}],
                           topic_prefix=f"rpa{cluster}", backend=backend)
        pgshovel(stack, cluster, "set", "upgrade", "rpa", str(cfg))
        wait_state(stack, cluster, "rpa", "done")
    finally:
        stop_writers(stop, threads)
    caught_up(stack, cluster, "rpa")
    done = subprocess.run([str(BIN / "pgshovel"), "replicate", "rpa", "--target", target.dsn, "--until-caught-up"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_rows(db, target, added)
    assert relay.stop() == 0
