"""``pgshovel set skip NAME --position P``: let a set's relay get past one change it cannot relay.

No value of a captured column should stop a relay (WIRE.md: a type without a mapping travels as
its text), but a bug can: the relay then stops with an error naming the table, the column and
the change's position (``pgshovel.position``), and stays stopped -- it never drops a change by
itself. This command is the operator's explicit decision to drop that one change: it records the
position (and who, when and why) in ZooKeeper under the set's ``relay/skips``; the relay, when it
meets the change at that position and cannot encode it, leaves it out, logs it, and records what
it left out (txid, table, op, error) next to the request. ``set status`` lists both. Nothing else
is skipped: a request for a position whose change encodes fine is ignored.

A row of an initial snapshot has a new position at each attempt (a new snapshot, a logical set's
new slot), so a request for a snapshot row's position also names its table and key, read from
where the relay recorded it stopped (``stopped`` in ``relay/skips``), and matches that row in any
later snapshot (pgshovel2.relay.skips).
"""

import getpass
import logging
import socket
import time
from typing import Any

from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import ConfigError
from pgshovel2.wire import parse_header

log = logging.getLogger(__name__)


def request_skip(store: ClusterStore, set_name: str, position: str, reason: str) -> dict[str, Any]:
    """Record an operator's request to skip the change at position (a ``pgshovel.position`` value
    from the relay's error); returns the set's skips record ({requested, skipped}).

    Raises ConfigError for a malformed position, ClusterError for no such set.
    """
    try:
        parse_header(position)
    except ValueError as exc:
        raise ConfigError("command line", "--position", position,
                          "must be a pgshovel.position as the relay's error prints it") from exc
    store.get_set(set_name)
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    request: dict[str, Any] = {"reason": reason, "at": time.time(), "by": who}
    if parse_header(position)[2]:  # a snapshot row: name it, its position changes at each attempt
        stopped = ((store.get_relay_record(set_name, "skips") or {}).get("stopped") or {}).get(position)
        if stopped is None:
            log.warning("no stop of the relay is recorded at snapshot position %s: the request matches only "
                        "that very position, which the next snapshot may not give the row again", position)
        else:
            request.update(table=stopped["table"], key=stopped.get("key"))
    return store.update_skips(set_name, "requested", position, request)
