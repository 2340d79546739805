"""``pgshovel-kafka-relay SET``: relay a replication set's changes to Kafka."""

import gc
import logging
import os
import re
import signal
import ssl
import threading

import click
from click.core import ParameterSource

from pgshovel2 import secretref
from pgshovel2.cli.allocator import MODES as ALLOCATORS
from pgshovel2.cli.allocator import describe, reexec
from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import (
    env_option,
    log_level_option,
    reports_errors,
    setup_logging,
    zookeeper_options,
    zookeeper_security,
)
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import RelayError
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings
from pgshovel2.relay import COMMIT_DELAY, RelayOptions, metrics, run_elected

log = logging.getLogger("pgshovel2.relay")
EXEC_ALLOCATOR = "exec-allocator"  # main's context object when it may re-execute the process
GC_YOUNG_THRESHOLD = 50_000  # allocations of container objects between collections of the young generation


def _memory_setting(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9]+(kB|MB|GB|TB)?", value.strip()):
        raise click.BadParameter(f"{value!r} is not a PostgreSQL memory size such as 64kB or 256MB", param=param)
    return value.strip() if value else None


def _tune_gc() -> None:
    """Collect the young generation less often, with what start-up made moved out of the
    collector's way (gc.freeze). The relay makes and frees container objects by the thousand per
    source run (message tuples, header lists); at the default threshold of 700 the collector ran
    every hundred messages or so and traversed the run's live messages each time: 7 % of the
    relay's main thread in a profile of small transactions. The relay makes few reference cycles."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 100)


@click.command()
@click.argument("set_name", metavar="SET")
@zookeeper_options
@kafka_options
@registry_options("needed for Avro")
@env_option("--snapshot/--skip-snapshot", "snapshot", default=None,
            help="Snapshot every table again (an online snapshot request when the set has a position to "
                 "resume from, else a new initial snapshot), or skip it; default: snapshot on the first start.")
@env_option("--progress-interval", default=10.0, type=float, help="Seconds between progress lines.")
@env_option("--poll-interval", default=0.02, type=float,
            help="Seconds between polls of PgQ when idle (lower: less latency, more queries).")
@env_option("--transactions/--no-transactions", "transactions", default=True,
            help="Exactly-once Kafka transactions, or the idempotent-only producer (at-least-once).")
@env_option("--max-transaction-messages", default=20000, type=click.IntRange(100),
            help="Split a PgQ batch into Kafka transactions of about this many messages.")
@env_option("--busy-commit-delay", default=0.25, type=click.FloatRange(0.0),
            help="Seconds a Kafka transaction may keep growing while the relay works through a backlog "
                 "(changes committed over a second ago): fewer, larger transactions; otherwise it commits "
                 "after the source's own delay (logical: 10 ms, up to 20 while changes keep coming; trigger: "
                 "none, the PgQ batch is the unit).")
@env_option("--commit-delay", default=None, type=click.FloatRange(0.0, 1.0),
            help="Logical backend: seconds from a transaction's end to its Kafka commit while changes keep "
                 f"coming (default {COMMIT_DELAY}). Longer: fewer Kafka transactions (less broker CPU per change), "
                 "more latency. A trigger set follows its queue's ticker_max_lag instead.")
@env_option("--slot-lag-warn-mb", default=1024, type=click.IntRange(1),
            help="Logical backend: warn when the set's slot retains more WAL than this (MiB).")
@env_option("--heartbeat-interval", default=10.0, type=click.FloatRange(0.1),
            help="Logical backend: seconds without changes before a heartbeat lets the slot advance.")
@env_option("--pgq-maint-interval", default=60.0, type=click.FloatRange(0.0),
            help="Trigger backend: seconds between runs of PgQ's maintenance (table rotation; pgqd's job "
                 "where pgqd runs), 0 for never.")
@env_option("--spill-dir", default=None, type=click.Path(file_okay=False, exists=True, writable=True),
            help="Logical backend, decoder pgoutput: directory of the spill files of large transactions "
                 "streamed before their commit (default: the system's temp dir).")
@env_option("--logical-decoding-work-mem", default=None, callback=_memory_setting,
            help="Logical backend: logical_decoding_work_mem of the relay's walsender (e.g. 64MB; default: "
                 "the server's); with decoder pgoutput, larger transactions are streamed and spilled here.")
@env_option("--zookeeper-session-timeout", default=10.0, type=click.FloatRange(1.0, 60.0),
            help="ZooKeeper session timeout (s): a killed active relay is replaced after about this long.")
@env_option("--metrics-port", default=None, type=click.IntRange(1, 65535),
            help="Serve Prometheus metrics on this port (/metrics); off by default.")
@env_option("--metrics-address", default="127.0.0.1",
            help="Address the metrics endpoint listens on (0.0.0.0: every interface; then use TLS and basic auth).")
@env_option("--metrics-tls-cert", default=None, type=click.Path(dir_okay=False, exists=True),
            help="Serve the metrics over HTTPS with this certificate (PEM, with its chain); needs --metrics-tls-key.")
@env_option("--metrics-tls-key", default=None, type=click.Path(dir_okay=False, exists=True),
            help="The metrics certificate's key (PEM).")
@env_option("--metrics-basic-auth", default=None, metavar="REF",
            help="USER:PASSWORD every metrics request must bring (HTTP basic auth; 401 otherwise), as env:NAME or "
                 "file:PATH (the value itself only in PGSHOVEL_METRICS_BASIC_AUTH).")
@env_option("--allocator", type=click.Choice(ALLOCATORS), default="auto",
            help="Memory allocator: jemalloc (less CPU per change; the relay re-executes itself with it preloaded), "
                 "system (the C library's malloc), or auto: jemalloc when installed and LD_PRELOAD is unset.")
@log_level_option
@reports_errors
def main(set_name: str, zookeeper_hosts: str, cluster: str, kafka: KafkaSettings,
         registry: RegistrySettings | None, snapshot: bool | None, progress_interval: float,
         poll_interval: float, transactions: bool, max_transaction_messages: int, busy_commit_delay: float,
         commit_delay: float | None, slot_lag_warn_mb: int, heartbeat_interval: float, pgq_maint_interval: float,
         spill_dir: str | None, logical_decoding_work_mem: str | None, zookeeper_session_timeout: float,
         metrics_port: int | None, metrics_address: str, metrics_tls_cert: str | None, metrics_tls_key: str | None,
         metrics_basic_auth: str | None, allocator: str, log_level: str) -> None:
    """Relay the changes of replication set SET to Kafka until SIGTERM or SIGINT.

    Run several for the same set: one is active (elected in ZooKeeper), the
    others stand by and take over when it dies.
    """
    if click.get_current_context().find_root().obj == EXEC_ALLOCATOR:
        reexec(allocator)
    setup_logging(log_level)
    # the relay's database sessions named in pg_stat_activity where neither the DSN nor the operator
    # (PGAPPNAME) names them (libpq: a DSN's application_name wins over PGAPPNAME)
    os.environ.setdefault("PGAPPNAME", f"pgshovel2 relay {set_name}"[:63])
    log.info("memory allocator: %s", describe(allocator, os.environ))
    _tune_gc()
    if metrics_port is not None:
        _serve_metrics(metrics_port, metrics_address, metrics_tls_cert, metrics_tls_key, metrics_basic_auth)
    stop = threading.Event()

    def on_signal(signum: int, _frame) -> None:
        log.info("received %s: finishing the current batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    mode = {None: "auto", True: "force", False: "skip"}[snapshot]
    options = RelayOptions(kafka, registry, mode, poll_interval, progress_interval,
                           transactions, max_transaction_messages, slot_lag_warn_mb << 20, heartbeat_interval,
                           pgq_maint_interval, spill_dir, logical_decoding_work_mem,
                           busy_commit_delay=busy_commit_delay, commit_delay=commit_delay)
    with ClusterStore(zookeeper_hosts, cluster, zookeeper_session_timeout, zookeeper_security()) as store:
        totals = run_elected(store, set_name, options, stop)
    log.info("stopped after %d changes in %d batches (%d restarts after interruptions)",
             totals.changes, totals.batches, totals.restarts)


def _serve_metrics(port: int, address: str, cert: str | None, key: str | None, basic_auth: str | None) -> None:
    """Start the metrics endpoint (pgshovel2.relay.monitor.metrics.serve). Raises click.BadParameter for a
    certificate without key or a literal password on the command line, RelayError when it cannot
    listen or load the certificate, SecretReferenceError for an unresolvable reference."""
    if (cert is None) != (key is None):
        raise click.BadParameter("give both --metrics-tls-cert and --metrics-tls-key", param_hint="--metrics-tls-cert")
    credentials = None
    if basic_auth:
        ctx = click.get_current_context()
        if ctx.get_parameter_source("metrics_basic_auth") == ParameterSource.COMMANDLINE and \
                not secretref.is_reference(basic_auth):
            raise click.BadParameter("on the command line it must be a reference, env:NAME or file:PATH (a value "
                                     "there shows in ps); put the value itself in PGSHOVEL_METRICS_BASIC_AUTH",
                                     param_hint="--metrics-basic-auth")
        credentials = secretref.resolve(basic_auth, "--metrics-basic-auth")
        if ":" not in credentials:
            raise click.BadParameter("must be USER:PASSWORD", param_hint="--metrics-basic-auth")
    try:
        metrics.serve(port, address, cert, key, credentials)
    except (OSError, ssl.SSLError) as exc:
        raise RelayError(f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}") from exc
    scheme = "https" if cert else "http"
    log.info("Prometheus metrics on %s://%s:%d/metrics%s", scheme, address, port,
             " (basic auth)" if credentials else "")
    if address not in ("127.0.0.1", "::1", "localhost") and not (cert and credentials):
        log.warning("the metrics endpoint listens on %s without %s: anyone who reaches it reads the set's metrics",
                    address, " and ".join(w for w, on in (("TLS", cert), ("basic auth", credentials)) if not on))


def entry() -> None:
    """The ``pgshovel-kafka-relay`` console script: :func:`main`, which may re-execute the process
    under the allocator --allocator asks for (main called in-process, as tests do, never does)."""
    main(obj=EXEC_ALLOCATOR)
