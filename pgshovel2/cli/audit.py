"""``pgshovel audit SET --against iceberg:hadoop:WAREHOUSE|kafka``: drift between the source and its
materialized Iceberg tables (pgshovel2.ops.audit_iceberg) or the state rebuilt from its Kafka topics
(pgshovel2.ops.audit_kafka), each exact at one position."""

import sys

import click

from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import cluster_store, reports_errors
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings


@click.command("audit")
@click.argument("set_name", metavar="SET")
@click.option("--against", required=True,
              help="What to compare the source with, exactly at one position: iceberg:hadoop:WAREHOUSE "
                   "(materialize --format iceberg; keys changed after its snapshot are in flight, counted) or "
                   "kafka (the state rebuilt from the set's topics).")
@click.option("--rounds", default=None, type=int,
              help="Comparisons; a key is reported only when it differs, with the same source row, in all. "
                   "[default: 1]")
@click.option("--pause", default=5.0, show_default=True, help="Seconds between rounds.")
@click.option("--bucket-rows", default=1000, show_default=True, help="Key range of one checksum bucket (iceberg).")
@kafka_options
@registry_options("Avro sets")
@click.option("--timeout", default=120.0, show_default=True,
              help="Seconds a round waits for the relay to relay what was committed before it.")
@click.pass_context
@reports_errors
def audit(ctx: click.Context, set_name: str, against: str, rounds: int | None, pause: float, bucket_rows: int,
          kafka: KafkaSettings, registry: RegistrySettings | None, timeout: float) -> None:
    """Compare SET's tables with their materialized state by key-range checksums; name the keys
    whose rows differ. Exit status 3 when some differ."""
    from pgshovel2.ops import audit as ops_audit

    with cluster_store(ctx) as store:
        record, _ = store.get_set(set_name)
        if against == "kafka":
            from pgshovel2.ops import audit_kafka

            results = audit_kafka.audit(store, record, kafka, registry,
                                        1 if rounds is None else rounds, pause, timeout)
        else:
            from pgshovel2.ops import audit_iceberg
            warehouse = _iceberg_warehouse(against)
            results = audit_iceberg.audit(store, record, warehouse, kafka, registry,
                                          1 if rounds is None else rounds, pause, bucket_rows, timeout)
    click.echo("\n".join(ops_audit.report(results)))
    if any(r.keys for r in results):
        sys.exit(3)


def _iceberg_warehouse(against: str) -> str:
    """WAREHOUSE of iceberg:hadoop:WAREHOUSE; raises click.BadParameter otherwise."""
    kind, _, rest = against.partition(":")
    catalog, _, warehouse = rest.partition(":")
    if kind != "iceberg" or catalog != "hadoop" or not warehouse:
        raise click.BadParameter(f"{against!r}: use kafka or iceberg:hadoop:WAREHOUSE_PATH", param_hint="--against")
    return warehouse
