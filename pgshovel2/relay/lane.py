"""The relay's native lane: a ChangeRun (consecutive change records of our output plugin, one
transaction) becomes the row envelope's Kafka messages, with their headers, in one call into the
native module (``pgshovel2_native.Lane``) instead of one Change at a time through RecordDecoder,
RowEnvelope and Emitter. The messages, their headers and their order are the same byte for byte
(tests/unit/test_lane.py); a record the lane does not take goes the Python way.

A table takes the lane when its route has the row envelope, a key and a native codec.
"""

from typing import TYPE_CHECKING, Optional

from pgshovel2 import wire
from pgshovel2.codec import native
from pgshovel2.relay.envelopes import RowEnvelope

if TYPE_CHECKING:
    from pgshovel2.relay.emitter import TableRoute

OPS = ((wire.OP, "c"), (wire.OP, "u"), (wire.OP, "d"))  # the op headers the lane gives messages


class TableLanes:
    """The native Lane of routes (table tag -> emitter.TableRoute) for the table tags of a
    ChangeRun (tags: its records' table indexes); lane is None when no table takes it."""

    def __init__(self, routes: dict[str, "TableRoute"], tags: list[str]):
        self.routes, self.tags = routes, tags
        picked = [_route(routes.get(tag)) for tag in tags]
        self.topics = [route.topic if route is not None else None for route in picked]
        mod = native.module()
        self.lane = None
        if mod is not None and hasattr(mod, "Lane") and any(picked):
            self.lane = mod.Lane([r.encoder.native if r is not None else None for r in picked], self.topics)

    def of(self, routes: dict[str, "TableRoute"], tags: list[str]) -> bool:
        """True when this was built from these routes and tags (the same objects)."""
        return routes is self.routes and tags is self.tags


def _route(route: Optional["TableRoute"]) -> Optional["TableRoute"]:
    """route when its table takes the lane, else None."""
    if route is None or type(route.envelope) is not RowEnvelope:
        return None
    return route if route.table.key and route.encoder.native is not None else None
