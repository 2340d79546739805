"""The reader of a started replication stream: the native ``CopyReader`` (native/src/stream/copy.rs) on
psycopg2's own connection and libpq, or the cursor's ``read_message`` without the native module.

Both give messages with ``payload`` (the XLogData's data) and ``data_start`` (its start LSN), or
None when the stream holds nothing now. The native reader costs no Python object per message
inside a native scan (``pgoutput_scan``), and it never moves the flush position on a keepalive
(psycopg2 does, pgshovel2.relay.logical.feedback); a keepalive asking for a reply is answered
through ``cursor.send_feedback(force=True)``, which sends only what the relay confirmed.
"""

import logging
from collections.abc import Callable

import psycopg2
import psycopg2._psycopg

from pgshovel2.codec import native

log = logging.getLogger(__name__)


def stream_reader(connection, cursor) -> Callable[[], object | None]:
    """The reader of cursor's started replication (cursor: a replication cursor of connection,
    psycopg2's). Reading all of a stream through one reader keeps psycopg2's keepalive rule out
    (it needs psycopg2 to have read every message). The cursor's read_message when the native
    module is absent or cannot find psycopg2's libpq (logged)."""
    cls = getattr(native.module(), "CopyReader", None)
    if cls is None:
        return cursor.read_message
    try:
        return cls(psycopg2._psycopg.__file__, connection, psycopg2.OperationalError,
                   lambda: cursor.send_feedback(force=True))
    except ImportError as exc:
        log.warning("reading the replication stream through psycopg2: the native reader cannot use its libpq: %s",
                    exc)
        return cursor.read_message
