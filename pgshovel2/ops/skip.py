"""``pgshovel set skip NAME --position P``: let a set's relay get past one change it cannot relay.

No value of a captured column should stop a relay (WIRE.md: a type without a mapping travels as
its text), but a bug can: the relay then stops with an error naming the table, the column and
the change's position (``pgshovel.position``), and stays stopped -- it never drops a change by
itself. This command is the operator's explicit decision to drop that one change: it records the
position (and who, when and why) in ZooKeeper under the set's ``relay/skips``; the relay, when it
meets the change at that position and cannot encode it, leaves it out, logs it, and records what
it left out (txid, table, op, error) next to the request. ``set status`` lists both. Nothing else
is skipped: a request for a position whose change encodes fine is ignored.
"""

import getpass
import socket
import time
from typing import Any

from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import ConfigError
from pgshovel2.wire import parse_header


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
    return store.update_skips(set_name, "requested", position, {"reason": reason, "at": time.time(), "by": who})
