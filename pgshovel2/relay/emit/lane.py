"""The relay's native lane: a ChangeRun (consecutive change records of our output plugin,
pgoutput's change messages, or PgQ event rows, of one transaction) becomes Kafka messages, with
their headers, in one call into the native module (``pgshovel2_native.Lane``) instead of one
Change at a time through the source's decoder, the envelope and Emitter. The messages, their
headers, their order and the debezium envelope's event numbering are the same byte for byte
(tests/unit/test_lane.py, test_lane_pgoutput.py); a record the lane does not take
goes the Python way.

A table takes the lane when its envelope has a native writer: the row envelope's native codec
(an unkeyed table's messages have a null key, its DELETEs carry the deleted row and its UPDATEs are
the old row's ``d`` then the new row's ``u``; one without its old row goes the Python way, which
refuses it), or, for a keyed table, the debezium envelope's native event
writer (DebeziumEvents).
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from pgshovel2 import tablenames, wire
from pgshovel2.codec import native
from pgshovel2.relay.emit.debezium import DebeziumEnvelope
from pgshovel2.relay.emit.envelopes import RowEnvelope

if TYPE_CHECKING:
    from pgshovel2.relay.emit.routes import TableRoute

OPS = ((wire.OP, "c"), (wire.OP, "u"), (wire.OP, "d"))  # the op headers the lane gives messages
NAMES = (wire.POSITION, wire.TXID, wire.TS_MS)  # the names of the headers Lane.encode_txns builds


class TableLanes:
    """The native Lane of routes (table tag -> emitter.TableRoute) for the table tags of a
    ChangeRun (tags: its records' table indexes; None: routes' tags, for trigger rows that name
    their table); lane is None when no table takes it.

    topics: per table index, the data topic of a lane table (else None); collections: per table
    index, the data collection a debezium lane table numbers its events in (else None); labels: per
    table index, a lane table's metrics label (table_label, else None).
    lane_limit(topics): the most key and value bytes one message of the lane may take
    (Guard.lane_limit; a change with a larger one goes the Python way, where the set's oversized
    policy applies), None: no limit.
    """

    def __init__(self, routes: dict[str, "TableRoute"], tags: list[str] | None,
                 lane_limit: Callable[[list[str | None]], int | None] | None = None):
        self.routes, self.run_tags = routes, tags
        tags = tags if tags is not None else list(routes)  # trigger rows: by the routes' tags
        writers = [_writer(routes.get(tag)) for tag in tags]
        collections = [routes[tag].envelope.collection
                       if w is not None and type(routes[tag].envelope) is DebeziumEnvelope else None
                       for tag, w in zip(tags, writers, strict=True)]
        named = [c for c in collections if c is not None]
        if len(set(named)) != len(named):  # two tables numbered in one collection: leave both to Python
            writers = [w if c is None else None for w, c in zip(writers, collections, strict=True)]
            collections = [None] * len(tags)
        self.topics = [routes[tag].topic if w is not None else None for tag, w in zip(tags, writers, strict=True)]
        self.labels = [table_label(routes[tag]) if w is not None else None
                       for tag, w in zip(tags, writers, strict=True)]
        self.collections = collections
        self.debezium = any(c is not None for c in collections)
        mod = native.module()
        self.lane = None
        if mod is not None and hasattr(mod, "Lane") and any(w is not None for w in writers):
            self.lane = mod.Lane(writers, self.topics, tags, lane_limit(self.topics) if lane_limit else None)

    def of(self, routes: dict[str, "TableRoute"], tags: list[str] | None) -> bool:
        """True when this was built from these routes and tags (the same objects)."""
        return routes is self.routes and tags is self.run_tags


def table_label(route: "TableRoute") -> str:
    """The per-table metrics' label of route's table: ``schema.table`` of its identity, as the
    operator writes it (tablenames.display)."""
    return tablenames.display(route.table.schema, route.table.name)


def _writer(route: Optional["TableRoute"]) -> Any:
    """The native writer of route's table when it takes the lane (the row envelope's RowCodec, or
    the debezium envelope's DebeziumEvents of a keyed table), else None."""
    if route is None:
        return None
    if type(route.envelope) is RowEnvelope:
        return route.encoder.native
    if type(route.envelope) is DebeziumEnvelope and route.table.key:
        return route.envelope.events
    return None
