"""Tables added to a set while a materialize stream runs (``set upgrade``): a thread that reads
the set's record in ZooKeeper every few seconds and stops the streaming query when the record
names a table the job does not read, so that the job restarts its query on the same checkpoint
with the new table's topic (read from its first offset: the upgrade's online snapshot rows, then
its changes). Stopping a query mid-batch is as safe as a driver crash: both jobs redo a batch
they did not finish (materialize.py, icemerge.py)."""

import logging
import threading
from collections.abc import Callable

from kazoo.exceptions import KazooException

from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import ClusterError
from pgshovel2.setrecord import SetRecord
from pgshovel2.zkauth import ZooKeeperAuth

log = logging.getLogger(__name__)


class TableWatch(threading.Thread):
    """Stops query once the set's record holds a table not in known ((schema, name) pairs).

    zookeeper_hosts, cluster, set_name: where the record is; interval: seconds between reads;
    stop_query: stops the running streaming query; auth: how to authenticate to ZooKeeper. grown
    (an Event) is set when it stopped it.
    A ZooKeeper error is logged and the next read tried: the stream itself does not need ZooKeeper.
    """

    def __init__(self, zookeeper_hosts: str, cluster: str, set_name: str, known: set[tuple[str, str]],
                 interval: float, stop_query: Callable[[], None], auth: ZooKeeperAuth | None = None):
        super().__init__(name=f"table-watch-{set_name}", daemon=True)
        self.hosts, self.cluster, self.set_name, self.known = zookeeper_hosts, cluster, set_name, known
        self.interval, self.stop_query, self.auth = interval, stop_query, auth
        self.grown, self.done = threading.Event(), threading.Event()

    def run(self) -> None:
        store: ClusterStore | None = None
        try:
            while not self.done.wait(self.interval):
                try:
                    store = store or ClusterStore(self.hosts, self.cluster, auth=self.auth).__enter__()
                    record = store.get_set(self.set_name)[0]
                except (ClusterError, KazooException, OSError) as exc:
                    log.warning("reading set %r from ZooKeeper for added tables failed (%s): trying again",
                                self.set_name, exc)
                    continue
                if self._stop_if_grown(record):
                    return
        finally:
            if store is not None:
                store.__exit__(None, None, None)

    def _stop_if_grown(self, record: SetRecord) -> bool:
        added = sorted({(t.schema, t.name) for t in record.tables} - self.known)
        if added:
            log.info("set %r (version %d) gained table(s) %s: restarting the stream to read them",
                     self.set_name, record.version, ", ".join(f"{s}.{n}" for s, n in added))
            self.grown.set()
            self.stop_query()
        return bool(added)

    def finish(self) -> bool:
        """Stop watching; True when the watch stopped the query for an added table."""
        self.done.set()
        self.join()
        return self.grown.is_set()
