"""The clock's end of a drain: counting a topic's committed messages with kcat.

A drain's clock stops when a read_committed consumer has seen every change. The consumer runs on
the same two cores as the tool it measures, so its cost is taken from whichever tool is faster:
confluent_kafka's consumer made a Python Message object per message, about 2.5 µs of CPU each
(half a core at pgshovel2's 2-row drains), where kcat (librdkafka in C, one byte written per
message) takes about 0.75 µs. Both tools' drains are counted the same way.

``committed_count`` counts a small topic after the fact (a set's positions topic: one record per
Kafka transaction the relay committed), with confluent_kafka: the capacity section and the
experiments' Kafka transaction counts.
"""

import subprocess
import tempfile
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from bench.peer.common import BOOTSTRAP


def committed_count(topic: str, settle: float = 1.0) -> int:
    """Committed messages of a one-partition topic (read_committed, from offset 0)."""
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"bench-count-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, quiet_since = 0, time.monotonic()
        while time.monotonic() - quiet_since < settle:
            got = [m for m in consumer.consume(10000, 0.2) if m.error() is None]
            if got:
                count, quiet_since = count + len(got), time.monotonic()
        return count
    finally:
        consumer.close()


def _wait_for_topic(topic: str, stop: threading.Event) -> bool:
    """True once topic exists with partitions (Debezium makes its topic at its first record);
    False if stop is set first."""
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"bench-meta-{time.time_ns()}"})
    try:
        while not stop.is_set():
            meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                return True
            time.sleep(0.1)
        return False
    finally:
        consumer.close()


class Counter(threading.Thread):
    """Counts the messages of topic (every partition, from offset 0, read_committed) until n, with
    ``kcat -c n``; ``done`` is set then and ``finished_at`` is its time.monotonic(). ``count`` is
    read from kcat's output (a byte a message) when asked, e.g. by wait's error."""

    def __init__(self, topic: str, n: int):
        super().__init__(daemon=True)
        self.topic, self.n = topic, n
        self.done, self.stop = threading.Event(), threading.Event()
        self.finished_at = 0.0
        self._out = tempfile.TemporaryFile()
        self._kcat: subprocess.Popen | None = None

    @property
    def count(self) -> int:
        """Messages kcat has written out so far: its output to a file is buffered, so this may be a
        few thousand behind what it read (a figure for wait's error, not for the clock)."""
        self._out.seek(0, 2)
        return self._out.tell()

    def run(self) -> None:
        if not _wait_for_topic(self.topic, self.stop):
            return
        self._kcat = subprocess.Popen(
            ["kcat", "-C", "-q", "-b", BOOTSTRAP, "-t", self.topic, "-o", "beginning", "-c", str(self.n),
             "-f", ".", "-X", "isolation.level=read_committed", "-X", "fetch.wait.max.ms=20"],
            stdout=self._out, stderr=subprocess.DEVNULL)
        if self.stop.is_set():  # wait gave up while kcat started: it may not have seen kcat to kill
            self._kcat.kill()
        if self._kcat.wait() == 0 and not self.stop.is_set():  # blocks in waitpid: the exit's own time
            self.finished_at = time.monotonic()
            self.done.set()

    def wait(self, timeout: float = 3600) -> None:
        """Returns once n messages were counted; raises SystemExit naming the topic and the count
        after timeout seconds."""
        if not self.done.wait(timeout):
            self.stop.set()
            if self._kcat is not None:
                self._kcat.kill()
            raise SystemExit(f"{self.topic}: {self.count} of {self.n} messages within {timeout} s")
