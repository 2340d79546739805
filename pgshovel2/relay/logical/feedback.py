"""Standby feedback from a thread of its own, so no keepalive ever confirms what is not in Kafka.

psycopg2 moves its flush position to a keepalive's WAL end when the position the relay confirmed
has reached the start LSN of the last message read (``explicitly_flushed_lsn >=
last_msg_data_start`` in its pqpath.c). Inside a transaction that start can lie below the
confirmed position -- a transaction that began before others committed carries the LSNs of its
early changes -- so a keepalive read there would confirm, past the transaction's commit, WAL whose
changes are not in Kafka yet; a relay that then dies loses them. The walsender sends a keepalive
in the middle of a transaction only when it has had no reply for ``wal_sender_timeout / 2``;
psycopg2 replies every status interval while it is read, but the relay loop does not read while
it waits for Kafka (a commit to a slow or stopped broker). :class:`FeedbackKeeper` re-sends the
positions already confirmed every ``interval`` seconds whatever the loop does, so the walsender
always has a recent reply and never asks. (Outside a transaction the source itself stops reading
while a keepalive could do harm: ``LogicalSource._keepalive_would_confirm_unrelayed``.)

psycopg2's ``read_message`` and ``send_feedback`` hold the GIL for their whole C call and never
release it, and so does the native reader (relay/logical/stream_reader.py), so the two threads never use
the connection at the same time.
"""

import logging
import threading

import psycopg2

log = logging.getLogger(__name__)
INTERVAL = 1.0  # s between feedback messages; far below any sane wal_sender_timeout / 2


class FeedbackKeeper:
    """Sends ``cursor.send_feedback(force=True)`` (nothing new confirmed) every interval seconds
    from a daemon thread, between :meth:`start` and :meth:`stop`. cursor: the replication cursor
    of a started replication. A failing send ends the thread quietly: the stream's reader sees the
    broken connection itself."""

    def __init__(self, cursor, interval: float = INTERVAL):
        self.cursor, self.interval = cursor, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sending (a no-op when already started)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="feedback-keeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sending and join the thread (before the connection is closed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.cursor.send_feedback(force=True)
            except psycopg2.Error as exc:
                log.debug("standby feedback stopped: %s", exc)
                return
