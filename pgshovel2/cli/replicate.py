"""``pgshovel replicate SET --target DSN``: keep a target PostgreSQL in sync with a set."""

import logging
import signal
import threading

import click

from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import cluster_store, env_option, reports_errors
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings
from pgshovel2.replica.apply import ApplyOptions, Replicator
from pgshovel2.replica.bootstrap import MODES, bootstrap

log = logging.getLogger("pgshovel2.replica")


@click.command("replicate")
@click.argument("set_name", metavar="SET")
@env_option("--target", required=True, help="DSN of the target PostgreSQL: a role owning the target database (or "
            "with CREATE there) and allowed to SET session_replication_role (a superuser, or GRANT SET ON PARAMETER "
            "on PostgreSQL 15+).")
@env_option("--bootstrap", "mode", type=click.Choice(MODES), default="copy",
            help="How an empty target is filled: COPY under an exported snapshot, the relay's snapshot "
                 "rows still in Kafka, or a Spark bootstrap's Parquet (--from-bootstrap). Ignored when the "
                 "target already replicates the set.")
@env_option("--from-bootstrap", default=None, type=click.Path(file_okay=False),
            help="Output directory of 'pgshovel bootstrap SET' (implies --bootstrap parquet).")
@kafka_options
@registry_options("Avro sets")
@env_option("--batch-changes", default=5000, type=click.IntRange(1),
            help="Most changes per target transaction when behind (1: one source transaction each).")
@env_option("--batch-delay", default=0.2, type=click.FloatRange(0.0),
            help="Seconds a batch may wait for more source transactions.")
@click.option("--until-caught-up", is_flag=True, help="Exit 0 once the end of the topics (as of the start) "
              "is applied, instead of following them.")
@env_option("--progress-interval", default=10.0, type=float, help="Seconds between progress lines.")
@click.pass_context
@reports_errors
def replicate(ctx: click.Context, set_name: str, target: str, mode: str, from_bootstrap: str | None,
              kafka: KafkaSettings, registry: RegistrySettings | None, batch_changes: int, batch_delay: float,
              until_caught_up: bool, progress_interval: float) -> None:
    """Keep the TARGET database equal to set SET's tables, until SIGTERM/SIGINT.

    An empty target is bootstrapped first; then every source transaction is
    applied once, in order, with its position stored in the target
    (pgshovel2_replica.position): restarting resumes after the last applied one.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    options = ApplyOptions(kafka, registry, batch_changes, batch_delay, progress_interval)
    with cluster_store(ctx) as store:
        rep = Replicator(store, set_name, target, options)
        try:
            st = rep.load_state()
            if st is None:
                record, _ = store.get_set(set_name)
                mode = "parquet" if from_bootstrap else mode
                if mode == "parquet" and not from_bootstrap:
                    raise click.UsageError("--bootstrap parquet needs --from-bootstrap DIR")
                st = bootstrap(rep.target, store.cluster, set_name, record, mode, kafka,
                               from_bootstrap)
            else:
                log.info("resuming set %r after position %r (txid %d, set version %d)", set_name, st.position,
                         st.txid, st.set_version)
            st = rep.run(st, stop, until_caught_up)
        finally:
            rep.close()
    click.echo(f"replica of set {set_name!r}: {st.transactions} transactions, {st.changes} changes applied; "
               f"at position {st.position!r}")
