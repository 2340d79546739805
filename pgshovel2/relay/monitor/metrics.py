"""Prometheus metrics of the relay (``pgshovel-kafka-relay --metrics-port N``).

Every metric has the label ``set``. Scrape ``http://<address>:<port>/metrics``:

- ``pgshovel2_relay_changes_total``: changes relayed (``rate()`` gives changes/s);
- ``pgshovel2_relay_batches_total``: Kafka transactions committed (each ends with a position record);
- ``pgshovel2_relay_lag_seconds``: how long the oldest change not yet in Kafka has waited since its
  commit (0 when caught up, also on an idle set): trigger backend, the age of the oldest queued
  batch the relay's consumer has not finished (pgq.get_consumer_info's lag, 0 with no event
  pending); logical backend, the relay's own measure (the commit time of the oldest transaction it
  read and has not acknowledged: relay/monitor/progress.py LagClock); updated every progress interval;
- ``pgshovel2_relay_lag_events`` (trigger): events queued and not yet relayed;
- ``pgshovel2_relay_slot_lag_bytes`` (logical): WAL written since the slot's confirmed position
  (the server's WAL, other databases' included); ``pgshovel2_relay_slot_retained_bytes``: WAL the
  slot keeps PostgreSQL from removing (from its restart_lsn);
- ``pgshovel2_relay_kafka_commit_seconds``: time of each Kafka transaction commit (histogram);
- ``pgshovel2_relay_errors_total{kind}``: interruptions and failures by error class
  (``OperationalError``, ``KafkaException``, ``FencedError``, ``LeadershipLostError``, ...);
- ``pgshovel2_relay_active``: 1 while this process is the set's active relay, 0 on standby;
- ``pgshovel2_relay_connection_up{dependency}``: 1 while the relay's connection to ``kafka``,
  ``postgresql`` or ``registry`` is up, 0 while down: the state ``set status`` shows
  (pgshovel2/relay/monitor/connections.py: librdkafka's error events and successful commits, database
  outages and rebuilt relays, registry requests); ``heartbeat``: 1 while a logical set's heartbeat
  action query succeeds, 0 while it fails (pgshovel2/relay/monitor/heartbeat.py);
- ``pgshovel2_relay_table_changes_total{table,op}``, ``pgshovel2_relay_table_bytes_total{table}``,
  ``pgshovel2_relay_table_last_relayed_timestamp_seconds{table}``: per table (``schema.table``,
  a part quoted when it holds a dot or a quote) its changes by op, their messages' bytes and
  when a Kafka commit last carried one (pgshovel2/relay/emit/tally.py).

The endpoint listens on 127.0.0.1 unless ``--metrics-address`` says otherwise; it can serve
HTTPS (``--metrics-tls-cert``/``--metrics-tls-key``) and ask for basic auth
(``--metrics-basic-auth``): a request without the credentials gets 401 and no metrics.
"""

import base64
import binascii
import hmac
import ssl
import threading
from http.server import ThreadingHTTPServer

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.exposition import MetricsHandler

CHANGES = Counter("pgshovel2_relay_changes", "Changes relayed to Kafka", ["set"])
BATCHES = Counter("pgshovel2_relay_batches", "Kafka transactions committed by the relay", ["set"])
LAG_SECONDS = Gauge("pgshovel2_relay_lag_seconds", "Age of the oldest change not yet in Kafka (s), 0 when caught up",
                    ["set"])
LAG_EVENTS = Gauge("pgshovel2_relay_lag_events", "Events queued and not yet relayed", ["set"])
COMMIT_SECONDS = Histogram("pgshovel2_relay_kafka_commit_seconds", "Kafka transaction commit time (s)", ["set"],
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
SLOT_LAG_BYTES = Gauge("pgshovel2_relay_slot_lag_bytes",
                       "Logical backend: WAL bytes written since the slot's confirmed position (all the server's)",
                       ["set"])
SLOT_RETAINED_BYTES = Gauge("pgshovel2_relay_slot_retained_bytes",
                            "Logical backend: WAL bytes the slot keeps from removal (from its restart_lsn)", ["set"])
ERRORS = Counter("pgshovel2_relay_errors", "Relay interruptions and failures by kind", ["set", "kind"])
ACTIVE = Gauge("pgshovel2_relay_active", "1 while this relay is the set's active relay", ["set"])
CONNECTION_UP = Gauge("pgshovel2_relay_connection_up",
                      "1 while the relay's connection to a dependency (kafka, postgresql, registry) is up, 0 while "
                      "down; heartbeat: 1 while the set's heartbeat action query succeeds (absent before first "
                      "used)", ["set", "dependency"])


TABLE_CHANGES = Counter("pgshovel2_relay_table_changes", "Changes of a table relayed to Kafka by op (c, u, d; "
                        "snapshot reads and TRUNCATEs not counted), added at each Kafka commit", ["set", "table", "op"])
TABLE_BYTES = Counter("pgshovel2_relay_table_bytes", "Key and value bytes of a table's change messages relayed to "
                      "Kafka, added at each Kafka commit", ["set", "table"])
TABLE_LAST_RELAYED = Gauge("pgshovel2_relay_table_last_relayed_timestamp_seconds", "Unix time (s) of the Kafka "
                           "commit that last carried a change of the table", ["set", "table"])


REALM = "pgshovel2 relay metrics"


def serve(port: int, address: str = "127.0.0.1", certfile: str | None = None, keyfile: str | None = None,
          credentials: str | None = None) -> ThreadingHTTPServer:
    """Serve /metrics on address:port from a daemon thread; returns the server (its
    server_address holds the port when port is 0).

    certfile, keyfile: PEM certificate (chain) and key: serve HTTPS (TLS 1.2 or later).
    credentials: ``USER:PASSWORD`` that every request must bring as HTTP basic auth (401
    otherwise). Raises OSError if the port is taken or a file cannot be read, ssl.SSLError for
    an unusable certificate or key.
    """
    handler = type("RelayMetricsHandler", (_Handler,), {"credentials": credentials.encode() if credentials else None})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    if certfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(certfile, keyfile)
        except BaseException:
            server.server_close()
            raise
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


class _Handler(MetricsHandler):
    """MetricsHandler that asks for basic auth when credentials (bytes ``USER:PASSWORD``) is set."""

    credentials: bytes | None = None

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.credentials is not None and not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def _authorized(self) -> bool:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(token.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self.credentials or b"")


def add_table_counts(set_name: str, counts: dict[str, list[int]], at: float) -> None:
    """Add a Kafka commit's per-table counts (table label -> [creates, updates, deletes, bytes]:
    pgshovel2.relay.emit.tally.TableTally.take) to set_name's per-table metrics, with at (Unix
    time, s) as each counted table's last relayed time."""
    for label, (c, u, d, nbytes) in counts.items():
        for op, n in (("c", c), ("u", u), ("d", d)):
            if n:
                TABLE_CHANGES.labels(set_name, label, op).inc(n)
        TABLE_BYTES.labels(set_name, label).inc(nbytes)
        TABLE_LAST_RELAYED.labels(set_name, label).set(at)


def error(set_name: str, exc: BaseException) -> None:
    """Count one error of exc's class for set_name."""
    ERRORS.labels(set_name, type(exc).__name__).inc()
SNAPSHOT_ROWS = Counter("pgshovel2_relay_online_snapshot_rows", "Online snapshot: rows emitted as op r",
                        ["set", "table"])
SNAPSHOT_CHUNKS = Counter("pgshovel2_relay_online_snapshot_chunks", "Online snapshot: chunks emitted", ["set", "table"])
SNAPSHOT_ESTIMATED = Gauge("pgshovel2_relay_online_snapshot_rows_estimated",
                           "Online snapshot: the table's estimated rows (pg_class.reltuples, 0 when never analyzed) "
                           "when the relay started reading it: rows done / this is the progress", ["set", "table"])
SNAPSHOT_DROPPED = Counter("pgshovel2_relay_online_snapshot_dropped_rows",
                           "Online snapshot: chunk rows left out because the stream changed their key meanwhile",
                           ["set", "table"])
