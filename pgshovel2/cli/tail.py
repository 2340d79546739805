"""``pgshovel tail SET``: print a set's source transactions as read from Kafka."""

import logging
import os
import sys

import click

from pgshovel2.cli.common import env_option, reports_errors
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import SetReader
from pgshovel2.consumer.render import change_json, pretty

log = logging.getLogger("pgshovel2.tail")


@click.command("tail")
@click.argument("set_name", metavar="SET")
@env_option("--bootstrap-servers", default="127.0.0.1:9092", help="Kafka bootstrap servers.")
@env_option("--schema-registry", default=None, help="Schema registry URL (Avro sets).")
@click.option("--from-beginning", is_flag=True,
              help="Start at the oldest retained messages; default: only transactions relayed from now on.")
@click.option("--table", "tables", multiple=True, metavar="TABLE",
              help="Only this table (schema.table, or a name unique in the set); repeatable.")
@click.option("--format", "fmt", type=click.Choice(["pretty", "json"]), default="pretty", show_default=True,
              help="pretty: a block per transaction; json: one JSON object per change per line "
                   "(bytes as base64).")
@click.option("--follow/--no-follow", default=False, show_default=True,
              help="Keep waiting for new transactions; without it, exit 0 once caught up.")
@click.option("--assembly-timeout", default=30.0, show_default=True, type=float,
              help="Seconds to wait for the data of a transaction whose END was read.")
@click.pass_context
@reports_errors
def tail(ctx: click.Context, set_name: str, bootstrap_servers: str, schema_registry: str | None,
         from_beginning: bool, tables: tuple[str, ...], fmt: str, follow: bool, assembly_timeout: float) -> None:
    """Print the transactions of set SET, reassembled from its topics.

    Exits 1 with an error naming topic, partition, offset, txid and position
    when the topics break the ordering/count rules of the wire contract.
    """
    with ClusterStore(ctx.obj["hosts"], ctx.obj["cluster"]) as store:
        reader = SetReader.for_set(store, set_name, bootstrap_servers, schema_registry,
                                   from_beginning=from_beginning, tables=tables,
                                   assembly_timeout=assembly_timeout)
    where = "the oldest retained messages" if from_beginning else "the end"
    log.info("reading set %r (%d table topic(s) + %s) from %s", set_name, len(reader.topics.tables),
             reader.topics.transactions, where)
    try:
        with reader:
            for txn in reader.transactions(until_caught_up=not follow):
                lines = [change_json(c) for c in txn.changes] if fmt == "json" else pretty(txn)
                click.echo("\n".join(lines))
                sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # whoever reads our output went away (e.g. `| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
