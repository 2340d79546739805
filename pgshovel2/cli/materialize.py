"""spark/materialize.py: bootstrap + change stream -> current state as Parquet or Iceberg (Spark job)."""

import logging

import click

from pgshovel2.cli.bootstrap import default_master
from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import (
    env_option,
    log_level_option,
    reports_errors,
    setup_logging,
    zookeeper_security,
    zookeeper_security_options,
)
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings


@click.command("materialize")
@click.option("--bootstrap", "bootstrap_dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="Bootstrap directory (pgshovel bootstrap --output), with manifest.json.")
@click.option("--output", type=click.Path(file_okay=False),
              help="Parquet: state directory, CURRENT -> state-<n>/tables/<schema>.<table>/.")
@click.option("--format", "fmt", type=click.Choice(["parquet", "iceberg"]), default="parquet", show_default=True,
              help="parquet: state folders under --output; iceberg: a MERGE per micro-batch into the "
              "Iceberg tables pgshovel.<set>.<schema>.<table> of --catalog (needs --stream).")
@click.option("--catalog", default=None, help="Iceberg catalog: hadoop:WAREHOUSE_PATH.")
@click.option("--stream", is_flag=True, help="Structured Streaming: keep merging micro-batches.")
@click.option("--checkpoint", type=click.Path(file_okay=False), help="Streaming checkpoint directory.")
@click.option("--available-now", is_flag=True, help="With --stream: process what is in Kafka now, then stop.")
@click.option("--trigger-seconds", default=10.0, show_default=True, help="With --stream: micro-batch interval.")
@kafka_options
@registry_options("Avro sets")
@env_option("--zookeeper-hosts", default=None, help="ZooKeeper connect string: read the set's records "
            "there, so that tables added to the set after the bootstrap are materialized too and a JSON set's "
            "columns of any set version are known (default: the bootstrap's record only).")
@env_option("--cluster", default="default", help="Cluster name (a namespace in ZooKeeper).")
@zookeeper_security_options
@click.option("--master", default=None, help="Spark master (default local[*]; under spark-submit, spark-submit's).")
@env_option("--jdbc-jar", default="/usr/share/java/postgresql.jar", help="PostgreSQL JDBC driver jar.")
@log_level_option
@reports_errors
def main(bootstrap_dir: str, output: str | None, fmt: str, catalog: str | None, stream: bool,
         checkpoint: str | None, available_now: bool,
         trigger_seconds: float, kafka: KafkaSettings, registry: RegistrySettings | None, zookeeper_hosts: str | None,
         cluster: str, master: str | None, jdbc_jar: str, log_level: str) -> None:
    """Materialize the current state of a bootstrapped set from its change stream."""
    from pgshovel2.sparkjobs import iceberg, icemerge, materialize, session

    setup_logging(log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if (fmt == "parquet") != (output is not None) or (fmt == "iceberg") != (catalog is not None):
        raise click.UsageError("--format parquet needs --output; --format iceberg needs --catalog")
    ice = iceberg.Catalog.parse(catalog) if catalog else None
    master = master or default_master()
    spark = session.session(master, "pgshovel2 materialize", session.jars(jdbc_jar) if master else None,
                            ice.settings() if ice else None)
    options = materialize.MaterializeOptions(bootstrap_dir, output or "", kafka, registry,
                                             stream, checkpoint, available_now, trigger_seconds,
                                             zookeeper_hosts, cluster, zookeeper_security())
    try:
        if ice:
            icemerge.run(spark, options, ice)
        else:
            materialize.run(spark, options)
    finally:
        if master:
            spark.stop()
    click.echo(f"state: {catalog if ice else materialize.current_state(output)}")

