"""``pgshovel tail SET``: print a set's source transactions as read from Kafka."""

import logging
import os
import sys
from collections.abc import Iterable

import click

from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import cluster_store, reports_errors
from pgshovel2.consumer import SetReader, SetTopics
from pgshovel2.consumer.render import Pretty, change_json, decoded
from pgshovel2.kafkaconf import KafkaSettings
from pgshovel2.registryconf import RegistrySettings

log = logging.getLogger("pgshovel2.tail")
# librdkafka prefetches up to 64 MiB by default; a terminal needs far less to keep up.
PREFETCH = {"queued.max.messages.kbytes": 4096, "fetch.max.bytes": 4 * 1024 * 1024}


@click.command("tail")
@click.argument("set_name", metavar="SET")
@kafka_options
@registry_options("Avro sets")
@click.option("--from-beginning", is_flag=True,
              help="Start at the oldest retained messages; default: only transactions relayed from now on.")
@click.option("--table", "tables", multiple=True, metavar="TABLE",
              help="Only this table (schema.table, or a table name unique in the set; docs/config.rst, "
                   "'Table names'); repeatable.")
@click.option("--format", "fmt", type=click.Choice(["pretty", "json"]), default="pretty", show_default=True,
              help="pretty: a block per transaction; json: one JSON object per change per line "
                   "(bytes as base64).")
@click.option("--follow/--no-follow", default=False, show_default=True,
              help="Keep waiting for new transactions; without it, exit 0 once caught up.")
@click.option("--assembly-timeout", default=30.0, show_default=True, type=float,
              help="Seconds to wait for the data of a transaction whose END was read.")
@click.pass_context
@reports_errors
def tail(ctx: click.Context, set_name: str, kafka: KafkaSettings, registry: RegistrySettings | None,
         from_beginning: bool, tables: tuple[str, ...], fmt: str, follow: bool, assembly_timeout: float) -> None:
    """Print the transactions of set SET, reassembled from its topics.

    Exits 1 with an error naming topic, partition, offset, txid and position
    when the topics break the ordering/count rules of the wire contract.
    """
    with cluster_store(ctx) as store:
        record, _ = store.get_set(set_name)
    # Messages stay bytes until printed: a transaction held for reassembly costs its bytes.
    reader = SetReader(SetTopics.from_record(record), kafka, registry,
                       from_beginning=from_beginning, tables=tables, assembly_timeout=assembly_timeout,
                       decode=False, kafka_config=PREFETCH)
    where = "the oldest retained messages" if from_beginning else "the end"
    log.info("reading set %r (%d table topic(s) + %s) from %s", set_name, len(reader.topics.tables),
             reader.topics.transactions, where)
    try:
        with reader:
            view = Pretty(record, reader.decoder) if fmt == "pretty" else None
            for txn in reader.transactions(until_caught_up=not follow):
                if view is None:
                    echo(change_json(decoded(c, reader.decoder)) for c in txn.changes)
                else:
                    echo(view.lines(txn))
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # whoever reads our output went away (e.g. `| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def echo(lines: Iterable[str], batch: int = 1000) -> None:
    """Print lines as they come, batch lines per write, then flush (one transaction is never joined whole)."""
    pending: list[str] = []
    for line in lines:
        pending.append(line)
        if len(pending) >= batch:
            click.echo("\n".join(pending))
            pending.clear()
    if pending:
        click.echo("\n".join(pending))
    sys.stdout.flush()
