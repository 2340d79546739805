"""The relay's settings (:class:`RelayOptions`), from the CLI (pgshovel2.cli.relay) to the loop."""

from dataclasses import dataclass

from pgshovel2.kafkaconf import Kafka
from pgshovel2.registryconf import Registry


@dataclass(frozen=True)
class RelayOptions:
    """Relay settings.

    bootstrap: the Kafka settings (pgshovel2.kafkaconf.KafkaSettings, or the bootstrap servers
    with this process's PGSHOVEL_KAFKA_* variables); registry_url: the schema registry's
    (pgshovel2.registryconf.RegistrySettings, or its URL), None without one.
    snapshot: 'auto' (first start only), 'force' or 'skip'. poll_interval,
    progress_interval: seconds. transactional: Kafka transactions (exactly-once) or the
    idempotent-only producer (at-least-once). max_transaction_messages: soft size bound of
    one Kafka transaction. slot_lag_warn_bytes, heartbeat_interval (s): logical backend.
    pgq_maint_interval (s): trigger backend, how often the relay runs PgQ's maintenance (0: never).
    spill_dir, logical_decoding_work_mem: logical backend with decoder pgoutput, where streamed
    transactions are spilled (None: the system's temp dir) and the walsender's memory limit
    above which a transaction is streamed before its commit (None: the server's setting).
    busy_commit_delay: seconds a Kafka transaction may grow from its first complete point while
    the relay works through a backlog: the source keeps delivering without going idle and the
    point's source commit (Commit.ts_ms, the database's clock) is older than BACKLOG_SECONDS
    (1 s) or this, whichever is longer. Fewer, larger Kafka transactions then, less broker work
    per change; a source that goes idle, or delivers younger changes, commits after its own
    commit_delay (logical: 10 ms), so latency while the relay keeps up does not grow. Values
    below commit_delay count as commit_delay. commit_delay: logical backend, seconds from a
    transaction's end to its Kafka commit while changes keep coming (None: the source's, 10 ms;
    pgshovel2.relay.logical.source.COMMIT_DELAY); a trigger set's Kafka transactions follow its
    PgQ batches (the queue's ticker_max_lag) and ignore it.
    """

    bootstrap: Kafka
    registry_url: Registry | None = None
    snapshot: str = "auto"
    poll_interval: float = 0.02
    progress_interval: float = 10.0
    transactional: bool = True
    max_transaction_messages: int = 20000
    slot_lag_warn_bytes: int = 1 << 30
    heartbeat_interval: float = 10.0
    pgq_maint_interval: float = 60.0
    spill_dir: str | None = None
    logical_decoding_work_mem: str | None = None
    busy_commit_delay: float = 0.25
    commit_delay: float | None = None
