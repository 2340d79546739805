"""``pgshovel cluster ...`` and ``pgshovel relay status``."""

import datetime
import json
import time

import click

from pgshovel2.cli.common import cluster_store, reports_errors
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops import cluster_admin, cluster_secure, recover
from pgshovel2.relay import election


def _store(ctx: click.Context) -> ClusterStore:
    return cluster_store(ctx)


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


class _DsnList(click.ParamType):
    """A DSN, repeatable; from the environment several are separated by ';' (a DSN has spaces)."""

    name = "DSN"
    envvar_list_splitter = ";"


@cluster_group.command("recover")
@click.option("--dsn", "dsns", multiple=True, type=_DsnList(), envvar="PGSHOVEL_RECOVER_DSN", show_envvar=True,
              help="Also look for prepared transactions on this server (repeatable; in the variable, ';'-separated). "
                   "A password: password=env:VAR or ~/.pgpass, not on the command line (ps shows it).")
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
    acl = info["acl"]
    click.echo(f"  acl: {', '.join(acl['acl'])}" + (f"; {len(acl['differs'])} znode(s) differ" if acl["differs"] else
                                                      " (every znode)"))
    for path, entries in sorted(acl["differs"].items()):
        click.echo(f"    {path}: {', '.join(entries)}")
    if acl["open"]:
        click.echo(f"  {len(acl['open'])} znode(s) open to anyone (world:anyone): 'pgshovel cluster secure' "
                   "with --zookeeper-auth closes them")
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


@cluster_group.command("secure")
@click.pass_context
@reports_errors
def cluster_secure_command(ctx: click.Context) -> None:
    """Put the --zookeeper-auth principal's ACL (and --zookeeper-acl entries) on every znode of the
    cluster, and remove the passwords stored in its set records, history and intents (also part of
    'cluster upgrade'). Processes then read the database password from ~/.pgpass, PGPASSWORD, a
    service file or a password=env:VAR / file:PATH reference in the DSN."""
    with _store(ctx) as store:
        for line in cluster_secure.secure(store):
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
