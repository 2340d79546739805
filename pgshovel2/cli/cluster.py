"""``pgshovel cluster ...`` and ``pgshovel relay status``."""

import datetime
import json
import time

import click

from pgshovel2.cli.common import reports_errors
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops import cluster_admin, recover
from pgshovel2.relay import election


def _store(ctx: click.Context) -> ClusterStore:
    return ClusterStore(ctx.obj["hosts"], ctx.obj["cluster"])


@click.group("cluster")
def cluster_group() -> None:
    """Cluster commands."""


@cluster_group.command("initialize")
@click.pass_context
@reports_errors
def cluster_initialize(ctx: click.Context) -> None:
    """Create the cluster's znodes (idempotent)."""
    with _store(ctx) as store:
        created = store.initialize()
    state = "initialized" if created else "already initialized"
    click.echo(f"cluster {ctx.obj['cluster']!r} {state} at {ctx.obj['hosts']}")


@cluster_group.command("recover")
@click.option("--dsn", "dsns", multiple=True,
              help="Also look for prepared transactions on this server (repeatable).")
@click.pass_context
@reports_errors
def cluster_recover(ctx: click.Context, dsns: tuple[str, ...]) -> None:
    """Commit or roll back what admin commands killed half-way left prepared.

    Run it while no other admin command runs.
    """
    with _store(ctx) as store:
        done = recover.recover(store, dsns)
    for line in done or ["nothing to recover: ZooKeeper and the databases agree"]:
        click.echo(line)


@cluster_group.command("inspect")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
@reports_errors
def cluster_inspect(ctx: click.Context, as_json: bool) -> None:
    """Show the cluster's version, sets, relays and leaders."""
    with _store(ctx) as store:
        info = cluster_admin.inspect(store)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    click.echo(f"cluster {info['cluster']} at {info['zookeeper']}: pgshovel2 {info.get('pgshovel_version')}")
    for s in info["sets"]:
        click.echo(f"  set {s['name']} version {s['version']} ({s['backend']}): {', '.join(s['tables'])}")
        click.echo(f"    relays: {_relays_line(s['relays'])}")
    for gid in info["pending_intents"]:
        click.echo(f"  unfinished admin command: {gid} (run 'pgshovel cluster recover')")


@cluster_group.command("upgrade")
@click.option("--force", is_flag=True, help="Also downgrade.")
@click.pass_context
@reports_errors
def cluster_upgrade(ctx: click.Context, force: bool) -> None:
    """Move the capture SQL of every set's database to this package's version (capture keeps running)."""
    with _store(ctx) as store:
        for line in cluster_admin.upgrade(store, force):
            click.echo(line)


def _relays_line(relays: dict) -> str:
    active = relays["active"]
    if active is None:
        return "none active" + (f", {len(relays['contenders'])} waiting" if relays["contenders"] else "")
    since = datetime.datetime.fromtimestamp(active["since"], datetime.UTC).isoformat(timespec="seconds")
    standby = [c for c in relays["contenders"] if c != active["identity"]]
    return (f"active {active['identity']} since {since} ({time.time() - active['since']:.0f}s)"
            f"; standby: {', '.join(standby) or 'none'}")


@click.group("relay")
def relay_group() -> None:
    """Relay commands (the relay itself is pgshovel-kafka-relay)."""


@relay_group.command("status")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
@reports_errors
def relay_status(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show which relay of set NAME is active, since when, and who stands by."""
    with _store(ctx) as store:
        info = election.status(store, name)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    else:
        click.echo(f"set {name}: {_relays_line(info)}")
