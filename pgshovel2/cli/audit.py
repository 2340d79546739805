"""``pgshovel audit SET --against iceberg:hadoop:WAREHOUSE``: drift between the source and its
materialized Iceberg tables (pgshovel2.ops.audit)."""

import sys

import click

from pgshovel2.cli.common import reports_errors
from pgshovel2.cluster import ClusterStore


@click.command("audit")
@click.argument("set_name", metavar="SET")
@click.option("--against", required=True,
              help="What to compare the source with: iceberg:hadoop:WAREHOUSE (materialize --format iceberg).")
@click.option("--rounds", default=3, show_default=True,
              help="Comparisons; a key is reported only when it differs, with the same source row, in all.")
@click.option("--pause", default=5.0, show_default=True, help="Seconds between rounds.")
@click.option("--bucket-rows", default=1000, show_default=True, help="Key range of one checksum bucket.")
@click.pass_context
@reports_errors
def audit(ctx: click.Context, set_name: str, against: str, rounds: int, pause: float, bucket_rows: int) -> None:
    """Compare SET's tables with their materialized state by key-range checksums; name the keys
    whose rows differ. Exit status 3 when some differ."""
    from pgshovel2.ops import audit as ops_audit

    kind, _, rest = against.partition(":")
    catalog, _, warehouse = rest.partition(":")
    if kind != "iceberg" or catalog != "hadoop" or not warehouse:
        raise click.BadParameter("use iceberg:hadoop:WAREHOUSE_PATH (comparing with Kafka is not implemented)",
                                 param_hint="--against")
    with ClusterStore(ctx.obj["hosts"], ctx.obj["cluster"]) as store:
        record, _ = store.get_set(set_name)
    results = ops_audit.audit(record, warehouse, rounds, pause, bucket_rows)
    click.echo("\n".join(ops_audit.report(results)))
    if any(r.keys for r in results):
        sys.exit(3)
