"""The relay: one set's capture -> Kafka transactions, exactly once, and what operators and the
other layers may use of it. This module is that public surface; nothing outside ``relay/`` imports
past it (``.importlinter``, contract "relay rooms").

The rooms, each a layer that points down only (``.importlinter``):

- the loop and its collaborators here: :mod:`~pgshovel2.relay.loop` (``Relay``: items -> Kafka
  transactions -> ``Source.ack``), :mod:`~pgshovel2.relay.commits` (``Commits``: the Kafka
  transactions' bookkeeping; ``Cursor``: where the loop is in the stream),
  :mod:`~pgshovel2.relay.runs` (``RunRelay``: the native lane's items),
  ``ddl/relaying`` (``ControlRelay``: control events), :mod:`~pgshovel2.relay.commit_clock`,
  :mod:`~pgshovel2.relay.control` and
  :mod:`~pgshovel2.relay.layout` (the set layout in effect), :mod:`~pgshovel2.relay.skips`,
  :mod:`~pgshovel2.relay.build` (a relay from its set record), :mod:`~pgshovel2.relay.supervisor`
  and :mod:`~pgshovel2.relay.election` (one active relay per set), :mod:`~pgshovel2.relay.options`;
- :mod:`~pgshovel2.relay.source`: the Source protocol and its items, all a source and the loop share;
- ``pgq/``: a trigger set's PgQ queue as a Source (entry ``PgqSource``);
- ``logical/``: a logical set's replication slot as a Source (entry ``LogicalSource``), our
  plugin's records (``records``), and ``logical/pgoutput/`` for PostgreSQL's pgoutput;
- ``emit/``: items -> Kafka messages: routes, the Emitter, the envelopes (row, debezium), the
  native lane, the oversized-message policy;
- ``snapshot/``: the initial snapshot and the online snapshot (and its operator requests);
- ``ddl/``: schema changes and the stops, drops and partition moves they bring;
- ``monitor/``: metrics, progress and lag, connection state, the heartbeat action query.

A position walks: source item (unit, ordinal) -> ``Relay`` (``loop``) -> ``wire.Position`` committed
with the data in one Kafka transaction -> ``Source.ack``. A change walks: ``pgq/`` or ``logical/``
item -> ``loop`` (or ``runs`` for a ChangeRun/TxnRun) -> ``emit/`` -> ``sinks.kafka``.
"""

from pgshovel2.relay import election
from pgshovel2.relay.ddl import gate as ddl_gate
from pgshovel2.relay.ddl import partition_moves
from pgshovel2.relay.ddl.schema_change import NEW_TOPIC, SCHEMA
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.envelopes import Envelope, SnapshotMarks
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.emit.routes import routes as table_routes
from pgshovel2.relay.logical.source import COMMIT_DELAY
from pgshovel2.relay.monitor import connections, metrics
from pgshovel2.relay.options import RelayOptions
from pgshovel2.relay.snapshot import request as online_request
from pgshovel2.relay.snapshot.request import (
    ACTIVE,
    CANCELLED,
    DEFAULT_CHUNK_SIZE,
    DONE,
    FAILED,
    PAUSED,
    SnapshotRequest,
)
from pgshovel2.relay.supervisor import run_elected

__all__ = [
    "ACTIVE", "CANCELLED", "COMMIT_DELAY", "DEFAULT_CHUNK_SIZE", "DONE", "FAILED", "NEW_TOPIC", "PAUSED",
    "SCHEMA", "Emitter", "Envelope", "RelayOptions", "SnapshotMarks", "SnapshotRequest", "TableRoute",
    "connections", "ddl_gate", "election", "metrics", "online_request", "partition_moves", "run_elected",
    "table_routes",
]
