"""The relay's lag tells the truth (issue #70): ``pgshovel2_relay_lag_seconds`` is 0 on an idle set,
and while a change waits for its Kafka commit it grows with the change's age, even with the relay
held up (the gauge is computed at each scrape), on both backends. The relay is held at its
``before_commit`` failpoint (``pause:DIR``)."""

import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import RelayProcess, caught_up, pgshovel, write_config
from tests.integration.test_monitoring import _free_port

LAG = 'pgshovel2_relay_lag_seconds{set="lag"}'


def _lag(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return float(next(line.rpartition(" ")[2] for line in text.splitlines() if line.startswith(LAG)))


class Releaser:
    """Lets every paused before_commit go on (creates its .go file), except while holding: then the
    next one stays paused until release()."""

    def __init__(self, folder: Path):
        self.folder, self.holding, self.held = folder, threading.Event(), None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for reached in sorted(self.folder.glob("*.reached")):
                go = reached.with_suffix(".go")
                if go.exists() or reached == self.held:
                    continue
                if self.holding.is_set() and self.held is None:
                    self.held = reached
                else:
                    go.touch()
            time.sleep(0.05)

    def release(self) -> None:
        self.holding.clear()
        if self.held is not None:
            self.held.with_suffix(".go").touch()

    def stop(self) -> None:
        self.release()
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("backend", ["trigger", "logical"])
def test_lag_is_zero_when_idle_and_grows_while_a_change_waits(stack, cluster, db, schema, tmp_path, backend):
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text)')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], backend=backend)
    pgshovel(stack, cluster, "set", "create", "lag", str(cfg))
    folder = tmp_path / "held"
    folder.mkdir()
    releaser = Releaser(folder)
    port = _free_port()
    relay = RelayProcess(stack, cluster, "lag", "--metrics-port", str(port), "--heartbeat-interval", "600",
                         log_path=tmp_path / "relay.log",
                         extra_env={"PGSHOVEL2_FAILPOINTS": f"before_commit=pause:{folder}"})
    try:
        relay.wait_for("snapshot done")
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO \"{schema}\".t VALUES (1, 'a')")
        caught_up(stack, cluster, "lag")
        time.sleep(5)  # idle: PgQ ticks an idle queue rarely; its consumer's lag grows meanwhile
        relay.wait_for("lag")
        assert _lag(port) == 0
        releaser.holding.set()
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO \"{schema}\".t VALUES (2, 'b')")
        deadline = time.monotonic() + 30
        while releaser.held is None:
            assert time.monotonic() < deadline, "the relay never reached its commit"
            time.sleep(0.05)
        time.sleep(3)
        first = _lag(port)
        time.sleep(1)
        second = _lag(port)
        assert 3 <= first < second <= first + 3, (first, second)
        releaser.release()
        caught_up(stack, cluster, "lag")
        time.sleep(2)
        assert _lag(port) == 0
    finally:
        releaser.stop()
    assert relay.stop() == 0
