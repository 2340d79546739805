"""Prometheus metrics of the relay (``pgshovel-kafka-relay --metrics-port N``).

Every metric has the label ``set``. Scrape ``http://<address>:<port>/metrics``:

- ``pgshovel2_relay_changes_total``: changes relayed (``rate()`` gives changes/s);
- ``pgshovel2_relay_batches_total``: Kafka transactions committed (each ends with a position record);
- ``pgshovel2_relay_lag_seconds`` / ``pgshovel2_relay_lag_events``: the queue's lag behind the
  relay's consumer (pgq.get_consumer_info), updated every progress interval;
  ``pgshovel2_relay_slot_lag_bytes`` for the logical backend (its slot's lag);
- ``pgshovel2_relay_kafka_commit_seconds``: time of each Kafka transaction commit (histogram);
- ``pgshovel2_relay_errors_total{kind}``: interruptions and failures by error class
  (``OperationalError``, ``KafkaException``, ``FencedError``, ``LeadershipLostError``, ...);
- ``pgshovel2_relay_active``: 1 while this process is the set's active relay, 0 on standby.
"""

from prometheus_client import Counter, Gauge, Histogram, start_http_server

CHANGES = Counter("pgshovel2_relay_changes", "Changes relayed to Kafka", ["set"])
BATCHES = Counter("pgshovel2_relay_batches", "Kafka transactions committed by the relay", ["set"])
LAG_SECONDS = Gauge("pgshovel2_relay_lag_seconds", "Queue lag behind the relay's consumer (s)", ["set"])
LAG_EVENTS = Gauge("pgshovel2_relay_lag_events", "Events queued and not yet relayed", ["set"])
COMMIT_SECONDS = Histogram("pgshovel2_relay_kafka_commit_seconds", "Kafka transaction commit time (s)", ["set"],
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
SLOT_LAG_BYTES = Gauge("pgshovel2_relay_slot_lag_bytes", "Logical backend: WAL bytes the slot is behind",
                       ["set"])
ERRORS = Counter("pgshovel2_relay_errors", "Relay interruptions and failures by kind", ["set", "kind"])
ACTIVE = Gauge("pgshovel2_relay_active", "1 while this relay is the set's active relay", ["set"])


def serve(port: int, address: str = "127.0.0.1") -> None:
    """Serve /metrics on address:port from a daemon thread. Raises OSError if the port is taken."""
    start_http_server(port, addr=address)


def error(set_name: str, exc: BaseException) -> None:
    """Count one error of exc's class for set_name."""
    ERRORS.labels(set_name, type(exc).__name__).inc()
SNAPSHOT_ROWS = Counter("pgshovel2_relay_online_snapshot_rows", "Online snapshot: rows emitted as op r",
                        ["set", "table"])
SNAPSHOT_CHUNKS = Counter("pgshovel2_relay_online_snapshot_chunks", "Online snapshot: chunks emitted", ["set", "table"])
SNAPSHOT_DROPPED = Counter("pgshovel2_relay_online_snapshot_dropped_rows",
                           "Online snapshot: chunk rows left out because the stream changed their key meanwhile",
                           ["set", "table"])
