"""spark/materialize.py: bootstrap + change stream -> current state as Parquet (Spark job)."""

import logging

import click

from pgshovel2.cli.bootstrap import default_master
from pgshovel2.cli.common import env_option, log_level_option, reports_errors, setup_logging


@click.command("materialize")
@click.option("--bootstrap", "bootstrap_dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="Bootstrap directory (pgshovel bootstrap --output), with manifest.json.")
@click.option("--output", required=True, type=click.Path(file_okay=False),
              help="State directory: CURRENT -> state-<n>/tables/<schema>.<table>/ (Parquet).")
@click.option("--stream", is_flag=True, help="Structured Streaming: keep merging micro-batches.")
@click.option("--checkpoint", type=click.Path(file_okay=False), help="Streaming checkpoint directory.")
@click.option("--available-now", is_flag=True, help="With --stream: process what is in Kafka now, then stop.")
@click.option("--trigger-seconds", default=10.0, show_default=True, help="With --stream: micro-batch interval.")
@env_option("--bootstrap-servers", default="127.0.0.1:9092", help="Kafka bootstrap servers.")
@env_option("--schema-registry", default=None, help="Schema registry URL.")
@click.option("--master", default=None, help="Spark master (default local[*]; under spark-submit, spark-submit's).")
@env_option("--jdbc-jar", default="/usr/share/java/postgresql.jar", help="PostgreSQL JDBC driver jar.")
@log_level_option
@reports_errors
def main(bootstrap_dir: str, output: str, stream: bool, checkpoint: str | None, available_now: bool,
         trigger_seconds: float, bootstrap_servers: str, schema_registry: str | None, master: str | None,
         jdbc_jar: str, log_level: str) -> None:
    """Materialize the current state of a bootstrapped set from its change stream."""
    from pgshovel2.sparkjobs import materialize, session

    setup_logging(log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    master = master or default_master()
    spark = session.session(master, "pgshovel2 materialize", session.jars(jdbc_jar) if master else None)
    options = materialize.MaterializeOptions(bootstrap_dir, output, bootstrap_servers, schema_registry, stream,
                                             checkpoint, available_now, trigger_seconds)
    try:
        materialize.run(spark, options)
    finally:
        if master:
            spark.stop()
    click.echo(f"state: {materialize.current_state(output)}")
