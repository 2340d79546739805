"""``pgshovel bootstrap SET --output PATH``: the Spark bootstrap job (also spark/bootstrap.py)."""

import logging
import os

import click

from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import (
    cluster_store,
    env_option,
    log_level_option,
    reports_errors,
    setup_logging,
    zookeeper_options,
    zookeeper_security,
)
from pgshovel2.cluster import ClusterStore
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings


def default_master() -> str | None:
    """None under spark-submit (it configured the master), else ``local[*]``."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def _options(func):
    decorators = [
        click.argument("set_name", metavar="SET"),
        click.option("--output", required=True, type=click.Path(file_okay=False),
                     help="Directory to create: manifest.json and tables/<schema>.<table>/ (Parquet)."),
        click.option("--to-kafka", is_flag=True,
                     help="Write the relay's op=r messages to the set's topics instead of Parquet."),
        click.option("--format", "fmt", type=click.Choice(["parquet", "iceberg"]), default="parquet",
                     show_default=True, help="iceberg: write the Iceberg tables pgshovel.<set>.<schema>.<table> "
                     "of --catalog (handoff in their properties); the manifest still goes to --output."),
        click.option("--catalog", default=None, help="Iceberg catalog (--format iceberg): hadoop:WAREHOUSE_PATH."),
        kafka_options,
        registry_options("Avro sets, --to-kafka"),
        click.option("--master", default=None, help="Spark master (default local[*]; under spark-submit, "
                     "spark-submit's)."),
        env_option("--jdbc-jar", default="/usr/share/java/postgresql.jar",
                   help="PostgreSQL JDBC driver jar (local runs)."),
        click.option("--partition-rows", default=250_000, show_default=True,
                     help="Target rows per JDBC partition."),
        click.option("--fetch-size", default=10_000, show_default=True, help="JDBC rows per round trip."),
        click.option("--native/--encoded-rows", default=True, show_default=True,
                     help="Read tables of plain types (integers, floats, text, bool, bytea) as JDBC columns "
                     "(fast), or every table as the capture trigger's encoded rows."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def bootstrap_set(store: ClusterStore, set_name: str, output: str, to_kafka: bool, fmt: str,
                  catalog: str | None, kafka: KafkaSettings, registry: RegistrySettings | None, master: str | None,
                  jdbc_jar: str, partition_rows: int, fetch_size: int, native: bool = True) -> None:
    """Run the bootstrap job (the set's record from store, not entered yet) and print where its manifest is."""
    from pgshovel2.sparkjobs import bootstrap, iceberg, session

    if (fmt == "iceberg") != (catalog is not None) or (fmt == "iceberg" and to_kafka):
        raise click.UsageError("--format iceberg needs --catalog (and no --to-kafka); --catalog needs it")
    ice = iceberg.Catalog.parse(catalog) if catalog else None
    master = master or default_master()
    jars = session.jars(jdbc_jar) if master else None
    spark = session.session(master, f"pgshovel2 bootstrap {set_name}", jars, ice.settings() if ice else None)
    options = bootstrap.BootstrapOptions(output, kafka, registry, to_kafka, partition_rows,
                                         fetch_size=fetch_size, native=native, iceberg=ice)
    try:
        with store:
            manifest = bootstrap.run(spark, store, set_name, options)
    finally:
        if master:
            spark.stop()
    rows = sum(t.rows for t in manifest.tables)
    click.echo(f"bootstrap of set {set_name!r}: {len(manifest.tables)} table(s), {rows} rows, handoff "
               f"{manifest.handoff_point}; manifest {os.path.join(output, 'manifest.json')}")


@click.command("bootstrap")
@_options
@click.pass_context
@reports_errors
def bootstrap(ctx: click.Context, set_name: str, **options) -> None:
    """Copy SET's tables with Spark in one consistent snapshot, with the exact handoff to the stream.

    Writes Parquet (or with --to-kafka, op=r messages) and a manifest that
    consumers start the stream from (SetReader.from_manifest, spark/materialize.py).
    """
    bootstrap_set(cluster_store(ctx), set_name, **options)


@click.command("bootstrap")
@zookeeper_options
@log_level_option
@_options
@reports_errors
def standalone(zookeeper_hosts: str, cluster: str, log_level: str, set_name: str, **options) -> None:
    """spark/bootstrap.py: the same job for spark-submit (see ``pgshovel bootstrap --help``)."""
    setup_logging(log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    bootstrap_set(ClusterStore(zookeeper_hosts, cluster, auth=zookeeper_security()), set_name, **options)
