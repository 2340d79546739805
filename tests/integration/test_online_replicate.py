"""``pgshovel replicate`` follows a set while an online snapshot (``pgshovel set snapshot``) of one
of its tables runs under concurrent writers: op ``r`` rows arrive between stream transactions and
SNAPSHOT_BEGIN/END records on the transactions topic; the target ends equal to the source."""

import subprocess
import time

import pytest

from tests.helpers import BIN, caught_up, cli_env, pgshovel
from tests.integration.test_online_snapshot import ROWS, make_set
from tests.online import start_writers, stop_writers, wait_state


def rows(conn, table: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        return cur.fetchall()


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
    tconn = target.connect()
    src, dst = rows(db, table), rows(tconn, table)
    tconn.close()
    assert len(src) == len(dst), (len(src), len(dst))
    assert src == dst, next((a, b) for a, b in zip(src, dst, strict=True) if a != b)
    assert relay.stop() == 0
