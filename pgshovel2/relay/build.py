"""Builds a set's relay from its record in ZooKeeper: source, sink, layout, control events."""

import logging
import threading
import time
from collections.abc import Callable

from pgshovel2 import backends
from pgshovel2.backends import chunks, privileges
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import native
from pgshovel2.codec.rows import as_values
from pgshovel2.db import connect
from pgshovel2.errors import RelayError, UnavailableError
from pgshovel2.relay.control import ControlEvents
from pgshovel2.relay.ddl.drop_watch import DropWatch
from pgshovel2.relay.ddl.gate import DdlGate
from pgshovel2.relay.ddl.partition_moves import PartitionMoves
from pgshovel2.relay.ddl.partition_watch import PartitionWatch
from pgshovel2.relay.election import Leadership
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.layout import Layout
from pgshovel2.relay.logical.relation_layout import all_mode_tags
from pgshovel2.relay.logical.source import LogicalSource
from pgshovel2.relay.loop import Relay
from pgshovel2.relay.monitor.connections import KAFKA, POSTGRESQL, REGISTRY, Connections
from pgshovel2.relay.options import RelayOptions
from pgshovel2.relay.pgq.source import PgqSource
from pgshovel2.relay.skips import Skips
from pgshovel2.relay.snapshot.online import OnlineSnapshot
from pgshovel2.relay.source import Source
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.sinks.registry import SchemaRegistry
from pgshovel2.wire.positions import read_position

log = logging.getLogger(__name__)

# Seconds the relay loop waits for ZooKeeper to answer its poll of the online snapshot request
# (between Kafka transactions; a slower answer is read at the next poll).
ZK_POLL_TIMEOUT = 2.0


def transactional_id(cluster: str, set_name: str) -> str:
    """The Kafka transactional id of a set's relay (the same for every instance: it fences)."""
    return f"pgshovel2.{cluster}.{set_name}"


def open_source(record: SetRecord, options: RelayOptions) -> Source:
    """The source of the set's backend (record.backend: its config's), connected. Raises
    UnavailableError when the database cannot be reached."""
    return _SOURCES[record.backend](record, options)


def _logical_source(record: SetRecord, options: RelayOptions) -> Source:
    return LogicalSource(record.relay_dsn, record.capture.slot, record.tables, options.heartbeat_interval,
                         publication=record.publication,
                         plugin=record.capture.plugin, mode_all=all_mode_tags(record),
                         spill_dir=options.spill_dir, decoding_work_mem=options.logical_decoding_work_mem,
                         raw_rows=native.module() is not None, runs=True, commit_delay=options.commit_delay)


def _pgq_source(record: SetRecord, options: RelayOptions) -> Source:
    if options.commit_delay is not None:
        log.warning("--commit-delay applies to logical sets: the Kafka transactions of a trigger set follow its PgQ "
                    "batches (queue %s, its ticker_max_lag; docs/operations.rst)", record.capture.queue)
    return PgqSource(record.relay_dsn, record.capture, options.poll_interval, maint_interval=options.pgq_maint_interval,
                     raw_rows=native.module() is not None, runs=True)


_SOURCES = {"logical": _logical_source, "trigger": _pgq_source}  # the source of each backend (SetConfig.backend)


def build(store: ClusterStore, set_name: str, options: RelayOptions, leadership: Leadership | None = None,
          stop: threading.Event | None = None, connections: Connections | None = None) -> Relay:
    """The relay of set_name with its latest record; stop (the relay's stop request) also ends
    its waits on Kafka and the registry; connections: told the state of the Kafka producer's and
    the registry client's connections (and the database's: up once built), None to keep it
    nowhere. Raises ClusterError (no such set), UnavailableError (database or Kafka unreachable)."""
    record, _ = store.get_set(set_name)
    check_privileges(record)
    sink = KafkaSink(options.bootstrap, transactional_id(store.cluster, set_name) if options.transactional else None,
                     stop=stop, on_connection=_feed(connections, KAFKA))
    registry = (SchemaRegistry(options.registry_url, stop=stop, on_connection=_feed(connections, REGISTRY))
                if options.registry_url else None)
    emitter = Emitter(set_name, {}, record.topics.transactions, None, sink)
    topics = record.topics

    def ensure_topics(wanted: dict[str, str], rec: SetRecord) -> None:
        single = frozenset({rec.topics.transactions, rec.topics.positions})
        for topic in sink.ensure_topics(wanted, rec.config.topics, single):
            log.info("created topic %s", topic)

    layout = Layout(record, emitter, registry, lambda version: store.get_version(set_name, version), ensure_topics)
    key = f"{store.cluster}/{set_name}"
    source = open_source(record, options)
    if connections is not None:
        connections.up(POSTGRESQL)
    drops = DropWatch(record, lambda: {t.qualified for t in store.get_set(set_name)[0].tables})
    return Relay(set_name, source, sink, layout, ControlEvents(store, set_name, registry), options,
                 lambda: read_position(options.bootstrap, topics.positions, key, stop=stop), topics.positions,
                 key.encode(),
                 leadership, lambda rec: store.put_relay_record(set_name, "snapshot", rec),
                 Skips.of(store.get_relay_record(set_name, "skips"),
                          lambda position, what: store.update_skips(set_name, "skipped", position,
                                                                    {**what, "at": time.time()}),
                          lambda position, what: _stopped(store, set_name, position, what)),
                 online_snapshot(store, record, emitter), partition_watch(store, record),
                 DdlGate(store, set_name, stop, leadership), drops)


def _feed(connections: Connections | None, dependency: str) -> Callable[[bool, str], None] | None:
    """The on_connection callback of a client of dependency, feeding connections (None: none)."""
    if connections is None:
        return None
    return lambda up, error: connections.up(dependency) if up else connections.down(dependency, error)


def check_privileges(record: SetRecord) -> None:
    """Raise RelayError naming every privilege the relay's role (SetRecord.relay_dsn) lacks for the
    set (pgshovel2.backends.privileges.relay_missing), before the relay writes anything; UnavailableError
    when the database cannot be reached (a wrong password: libpq's error names the role)."""
    conn = connect(record.relay_dsn, f"set {record.name!r} (as its relay role)", UnavailableError)
    try:
        with conn.cursor() as cur:
            problems = privileges.relay_missing(cur, record.config)
    finally:
        conn.close()
    if problems:
        raise RelayError(f"set {record.name!r}: {len(problems)} missing privilege(s) in the set's database (the "
                         "grants: pgshovel set create --print-grants CONFIG):\n  " + "\n  ".join(problems))


def partition_watch(store: ClusterStore, record: SetRecord) -> PartitionWatch:
    """The watch over the set's partitions (pgshovel2.relay.ddl.partition_watch), keeping what it saw in
    the relay record ``partitions``."""
    name = record.name
    return PartitionWatch(record.relay_dsn, PartitionMoves(lambda: store.get_relay_record(name, "partitions"),
                                                     lambda data: store.put_relay_record(name, "partitions", data)))


def _stopped(store: ClusterStore, set_name: str, position: str, what: dict) -> None:
    """Record where the relay stops on a change it cannot relay (``stopped`` of relay/skips, what
    ``pgshovel set skip`` reads a snapshot row's table and key from). Best effort: the error
    itself is what the operator sees."""
    try:
        store.update_skips(set_name, "stopped", position, {**what, "at": time.time()})
    except Exception:  # noqa: BLE001 -- ZooKeeper down: the relay stops with its error anyway
        log.warning("could not record the stop at %s in ZooKeeper", position, exc_info=True)


def online_snapshot(store: ClusterStore, record: SetRecord, emitter: Emitter) -> OnlineSnapshot:
    """The set's online snapshots (pgshovel2.relay.snapshot.online): request in ZooKeeper, chunks and
    watermarks on connections of their own, keys by the emitter's routes in effect. Raises
    UnavailableError when the database cannot be reached."""
    name = record.name
    reader = chunks.ChunkReader(record, backends.encode_row(record), UnavailableError)

    def key_of(table: Table):
        enc = emitter.routes[table.qualified].encoder
        # stream rows come as their JSON text (for the native codec): as_values reads them
        return lambda row: enc.key(enc.convert(as_values(row)))

    return OnlineSnapshot(name, lambda: store.get_snapshot_request(name, ZK_POLL_TIMEOUT),
                          lambda data, version: store.put_snapshot_request(name, data, version),
                          lambda stats: store.put_relay_record(name, "online_snapshot", stats),
                          reader, key_of, lambda: store.zk.connected)
