"""``pgshovel-kafka-relay SET``: relay a replication set's changes to Kafka."""

import logging
import signal
import threading

import click

from pgshovel2.cli.common import env_option, log_level_option, reports_errors, setup_logging, zookeeper_options
from pgshovel2.cluster import ClusterStore
from pgshovel2.relay.loop import Relay, RelayOptions

log = logging.getLogger("pgshovel2.relay")


@click.command()
@click.argument("set_name", metavar="SET")
@zookeeper_options
@env_option("--bootstrap-servers", default="127.0.0.1:9092", help="Kafka bootstrap servers.")
@env_option("--schema-registry", default=None,
            help="Confluent-compatible schema registry URL (needed for Avro).")
@env_option("--snapshot/--skip-snapshot", "snapshot", default=None,
            help="Force a new initial snapshot, or skip it; default: snapshot on the first start.")
@env_option("--progress-interval", default=10.0, type=float, help="Seconds between progress lines.")
@env_option("--poll-interval", default=0.05, type=float, help="Seconds between polls when idle.")
@log_level_option
@reports_errors
def main(set_name: str, zookeeper_hosts: str, cluster: str, bootstrap_servers: str,
         schema_registry: str | None, snapshot: bool | None, progress_interval: float,
         poll_interval: float, log_level: str) -> None:
    """Relay the changes of replication set SET to Kafka until SIGTERM or SIGINT."""
    setup_logging(log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame) -> None:
        log.info("received %s: finishing the current batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    mode = {None: "auto", True: "force", False: "skip"}[snapshot]
    options = RelayOptions(bootstrap_servers, schema_registry, mode, poll_interval, progress_interval)
    with ClusterStore(zookeeper_hosts, cluster) as store:
        relay = Relay(store, set_name, options)
        log.info("relaying set %r (version %d) from queue %s to %s", set_name, relay.set_version,
                 relay.queue, bootstrap_servers)
        relay.run(stop)
    log.info("stopped after %d changes in %d batches", relay.changes, relay.batches)
