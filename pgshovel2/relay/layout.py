"""The set layout in effect in the stream: which set record's tables, columns and schemas
the relay encodes with right now, and the emitter routes built from it.

A relay starts in the layout of the set version its committed position was relayed in
(Position.start_version) and switches at the stream's control events
(:mod:`pgshovel2.relay.control`), never because ZooKeeper changed.
"""

import logging
from collections.abc import Callable

from pgshovel2.relay.emit import routes as emit_routes
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry

log = logging.getLogger(__name__)


class Layout:
    """The record in effect (:attr:`record`) and the emitter's routes.

    latest: the set's current record (from ZooKeeper); history(version): the record of an
    older version; ensure_topics(topic -> cleanup.policy, record): create what is missing.
    """

    def __init__(self, latest: SetRecord, emitter: Emitter, registry: SchemaRegistry | None,
                 history: Callable[[int], SetRecord], ensure_topics: Callable[[dict[str, str], SetRecord], None]):
        self.record, self.emitter, self.registry = latest, emitter, registry
        self._latest, self._history, self._ensure_topics = latest, history, ensure_topics

    @property
    def version(self) -> int:
        """The set version in effect."""
        return self.record.version

    def create_topics(self) -> None:
        """Create the missing topics of the latest record (the positions topic among them)."""
        self._ensure_topics(emit_routes.topics(self._latest), self._latest)

    def resume(self, version: int) -> None:
        """Use the layout of set version (0: the latest), building every route."""
        record = self._latest
        if version and version != self._latest.version:
            log.info("resuming in the layout of set version %d (the latest is %d)", version, self._latest.version)
            record = self._history(version)
        self.use(record)

    def drop(self, record: SetRecord, tag: str) -> None:
        """Relay in the layout of record, which no longer has table tag (dropped), from the next change on."""
        self.record = record
        self.emitter.drop_table(tag, record.version)

    def use(self, record: SetRecord, route: TableRoute | None = None) -> None:
        """Relay in the layout of record from the next change on: only route's table changed,
        or (route None) every route rebuilt and missing topics created."""
        self.record = record
        if route is not None:
            self.emitter.switch_table(route, record.version)
            return
        self._ensure_topics(emit_routes.topics(record), record)
        routes, txn_writer = emit_routes.routes(record, self.registry)
        self.emitter.switch(routes, record.version, txn_writer)
        self.emitter.use_policy(record.config.oversized, record.topics.dead_letter)
