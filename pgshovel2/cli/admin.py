"""``pgshovel``: administer clusters and replication sets in ZooKeeper."""

import json

import click

from pgshovel2 import controlsconf, names
from pgshovel2.cli.clientopts import kafka_options, registry_options
from pgshovel2.cli.common import (
    LazyGroup,
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
from pgshovel2.ops import accept_ddl, admin, repoint, resnapshot, skip, status, upgrade, verify
from pgshovel2.registryconf import RegistrySettings
from pgshovel2.relay import DEFAULT_CHUNK_SIZE
from pgshovel2.setrecord import SetRecord

_LAZY = {"audit": "pgshovel2.cli.audit:audit", "bootstrap": "pgshovel2.cli.bootstrap:bootstrap",
         "cluster": "pgshovel2.cli.cluster:cluster_group", "relay": "pgshovel2.cli.cluster:relay_group",
         "replicate": "pgshovel2.cli.replicate:replicate", "tail": "pgshovel2.cli.tail:tail"}


@click.group(cls=LazyGroup, lazy=_LAZY)
@zookeeper_options
@log_level_option
@click.pass_context
def main(ctx: click.Context, zookeeper_hosts: str, cluster: str, log_level: str) -> None:
    """Change data capture from PostgreSQL to Kafka: cluster and set administration."""
    setup_logging(log_level)
    ctx.obj = {"hosts": zookeeper_hosts, "cluster": cluster, "zk_auth": zookeeper_security(ctx)}


def _store(ctx: click.Context) -> ClusterStore:
    return cluster_store(ctx)


@main.group("set")
def set_group() -> None:
    """Replication set commands."""


@set_group.command("create")
@click.argument("name")
@click.argument("config", type=click.Path(dir_okay=False), required=False)
@click.option("--dry-run", is_flag=True, help="Check CONFIG and print what would be created; change nothing.")
@click.option("--print-grants", is_flag=True,
              help="Print the SQL granting the set's admin role (database.dsn) and relay role (database.relay_dsn) "
                   "what they need, neither a superuser (set create --print-grants CONFIG); touch nothing.")
@env_option("--transfer-ownership", is_flag=True,
              help="With --print-grants: where a path needs the tables' owner (PL/pgSQL capture's set upgrade and "
                   "drop, pgoutput's own publication), print ALTER TABLE ... OWNER TO the admin role.")
@click.pass_context
@reports_errors
def set_create(ctx: click.Context, name: str, config: str | None, dry_run: bool, print_grants: bool,
               transfer_ownership: bool) -> None:
    """Create set NAME from the YAML file CONFIG and install its capture."""
    if print_grants:
        click.echo(admin.grants(config or name, transfer_ownership), nl=False)
        return
    if transfer_ownership:
        raise click.UsageError("--transfer-ownership goes with --print-grants")
    if config is None:
        raise click.UsageError("missing argument CONFIG")
    with _store(ctx) as store:
        record = admin.create_set(store, name, config, dry_run=dry_run)
    tables = ", ".join(f"{t.schema}.{t.name}" for t in record.tables)
    verb = "would create" if dry_run else "created"
    click.echo(f"{verb} set {name!r} (version {record.version}, {record.backend}, {record.capture.describe()}): "
               f"{tables}")
    if chosen := record.capture.chosen():
        click.echo(f"  {chosen}")
    if record.change and record.change.get("decoder"):
        click.echo(f"decoder: {record.change['decoder']}")
    for note in (record.change or {}).get("notes", []):
        click.echo(f"  note: {note}")
    for line in _topic_lines(record) + _control_lines(record):
        click.echo(line)
    if dry_run:
        click.echo("dry run: nothing was changed")


def _control_lines(record: SetRecord) -> list[str]:
    """``  controls of <table>: <column> <control>, ...`` per table with column controls (a hash
    shows its salt's reference, never a salt)."""
    return [f"  controls of {names.qualified(tc.schema, tc.name)}: " + ", ".join(controlsconf.describe(c)
                                                                              for c in tc.controls)
            for tc in record.config.tables if tc.controls]


def _topic_lines(record: SetRecord) -> list[str]:
    topics = record.topics
    return ([f"  topic {topic} <- {tag}" for tag, topic in topics.tables.items()]
            + [f"  topic {topics.transactions} (transactions)", f"  topic {topics.positions} (relay positions)"])


@set_group.command("list")
@click.pass_context
@reports_errors
def set_list(ctx: click.Context) -> None:
    """List the cluster's sets with version and tables."""
    with _store(ctx) as store:
        for record in store.records():
            click.echo(f"{record.name}\tversion {record.version}\t{len(record.tables)} table(s)\t"
                       f"{record.backend}\t{record.config.encoding}")


@set_group.command("inspect")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the full record as JSON.")
@click.option("--version", "version", type=int, default=None, help="Show this version from the set's history.")
@click.option("--history", is_flag=True, help="List the set's versions and what changed in each.")
@click.pass_context
@reports_errors
def set_inspect(ctx: click.Context, name: str, as_json: bool, version: int | None, history: bool) -> None:
    """Show set NAME: config, tables, columns, keys, snapshot state (or one version, or the history)."""
    with _store(ctx) as store:
        if history:
            if as_json:
                click.echo(json.dumps(admin.history(store, name), indent=2, sort_keys=True))
            for line in [] if as_json else admin.history_lines(store, name):
                click.echo(line)
            return
        info = admin.inspect_set(store, name, version)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    cfg = info["config"]
    click.echo(f"set {name} (version {info['version']}, cluster {info['cluster']})")
    click.echo(f"  backend {cfg['backend']}, encoding {cfg['encoding']}, envelope {cfg['envelope']}, "
               f"topic prefix {cfg['topic_prefix'] or name}")
    if info.get("slot"):
        click.echo(f"  replication slot {info['slot']} (output plugin pgshovel2_decoder)")
    else:
        click.echo(f"  queue {info['queue']}, triggers {info['trigger']}")
    for tag, topic in info["topics"]["tables"].items():
        click.echo(f"  topic {topic} <- {tag}")
    click.echo(f"  topics {info['topics']['transactions']} (transactions), {info['topics']['positions']} "
               "(relay positions)")
    oversized = cfg.get("oversized") or {"policy": "fail", "columns": []}
    click.echo(f"  oversized messages: {oversized['policy']}"
               + (f" (cut: {', '.join(oversized['columns'])})" if oversized["columns"] else "")
               + (f" -> topic {info['topics']['dead_letter']}" if info["topics"].get("dead_letter") else ""))
    snap = info["snapshot"]
    click.echo(f"  snapshot: {json.dumps(snap) if snap else 'not taken yet'}")
    for t in info["tables"]:
        key = ", ".join(t["key"]) or "(unkeyed)"
        now = f" (now {t['renamed'][0]}.{t['renamed'][1]})" if t.get("renamed") else ""
        kept = f", key kept as ({', '.join(c['pg_type'] for c in t['key_layout'])})" if t.get("key_layout") else ""
        click.echo(f"  table {t['schema']}.{t['name']}{now}  key: {key} ({t['key_source']}{kept})")
        for c in t["columns"]:
            click.echo(f"    {c['name']}: {c['pg_type']}{'' if c['nullable'] else ' not null'}")


@set_group.command("upgrade")
@click.argument("name")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the diff (tables, columns, triggers, topics); change nothing.")
@click.option("--no-snapshot", is_flag=True, help="Do not request an online snapshot of the tables added.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON (what changed per table).")
@click.pass_context
@reports_errors
def set_upgrade(ctx: click.Context, name: str, config: str, dry_run: bool, no_snapshot: bool, as_json: bool) -> None:
    """Apply CONFIG to set NAME as its next version, while writes and relays go on.

    Atomic across the database and ZooKeeper (two-phase commit); if someone
    else upgraded the set first, nothing changes and the command fails.
    """
    with _store(ctx) as store:
        result = (upgrade.plan if dry_run else upgrade.upgrade_set)(store, name, config)
        added = [t.table for t in result.tables if t.kind == "added"]
        req, notes = (None, []) if dry_run or no_snapshot or not added else resnapshot.after_upgrade(store, name, added)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "dry_run": dry_run, "notes": notes,
                               "snapshot_request": None if req is None else req.id}, indent=2, sort_keys=True))
        return
    for line in result.lines() + notes:
        click.echo(line)
    if req is not None:
        click.echo(f"online snapshot {req.id} requested: {', '.join(req.tables)} ('pgshovel set snapshot {name} "
                   "--status' shows it)")
    if dry_run and result.changes:
        click.echo("dry run: nothing was changed")


@set_group.command("status")
@click.argument("name")
@kafka_options
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option("--wait", is_flag=True, help="First wait until the relay has relayed every change committed "
              "before the command started (a drain check).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds --wait waits at most.")
@env_option("--standby", "standby_dsn", default=None,
            help="DSN of a physical standby: say whether a logical set's slot is synced to it (PostgreSQL 17+). "
                 "A password: password=env:VAR or ~/.pgpass, not on the command line (ps shows it).")
@click.pass_context
@reports_errors
def set_status(ctx: click.Context, name: str, kafka: KafkaSettings, as_json: bool, wait: bool,
               timeout: float, standby_dsn: str | None) -> None:
    """Show set NAME's queue lag, active relay, last committed position and Kafka end offsets,
    and for a logical set whether its slot survives a failover."""
    with _store(ctx) as store:
        if wait:
            status.wait_caught_up(store, name, kafka, timeout)
        info = status.set_status(store, name, kafka, standby_dsn)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True, default=str))
        return
    for line in status.lines(info):
        click.echo(line)


@set_group.command("repoint")
@click.argument("name")
@click.option("--dsn", "new_dsn", required=True, envvar="PGSHOVEL_REPOINT_DSN", show_envvar=True,
              help="DSN of the promoted replica that now holds the set's data (stored in ZooKeeper: no password; "
                   "password=env:VAR / file:PATH, ~/.pgpass or PGPASSWORD instead).")
@click.option("--force", is_flag=True, help="Accept a database with another system identifier.")
@click.option("--rebootstrap", is_flag=True, help="Logical set: accept a database without the set's slot "
              "(it did not fail over); the relay must then run with --snapshot and consumers re-bootstrap.")
@click.pass_context
@reports_errors
def set_repoint(ctx: click.Context, name: str, new_dsn: str, force: bool, rebootstrap: bool) -> None:
    """Move set NAME to the database at --dsn (a promoted streaming replica), as its next version.

    Checks that the new database is a primary holding the set's queue and
    consumer, or its slot (and publication), and is a physical copy of the old one
    when that still answers; running relays restart on it by themselves.
    """
    with _store(ctx) as store:
        for line in repoint.repoint_set(store, name, new_dsn, force, rebootstrap):
            click.echo(line)


@set_group.command("skip")
@click.argument("name")
@click.option("--position", required=True, help="The pgshovel.position of the change, as the relay's error prints it.")
@click.option("--reason", required=True, help="Why (kept in ZooKeeper with the request).")
@click.pass_context
@reports_errors
def set_skip(ctx: click.Context, name: str, position: str, reason: str) -> None:
    """Let set NAME's relay leave out the one change at --position that it cannot encode.

    For a change that stopped the relay with an error naming its position (a bug); the next
    start leaves it out and records what it left out (set status lists both). Nothing else is
    skipped, and a change that encodes fine is never skipped.
    """
    with _store(ctx) as store:
        record = skip.request_skip(store, name, position, reason)
    click.echo(f"set {name!r}: the relay will leave out the change at {position} if it cannot encode it "
               f"({len(record['requested'])} request(s), {len(record.get('skipped', {}))} left out so far); "
               "restart the relay")


@set_group.command("accept-ddl")
@click.argument("name")
@click.argument("table")
@click.option("--new-topic", is_flag=True,
              help="Go on in the table's next topic generation ({topic}.g<n>), filled by an online snapshot.")
@click.option("--reason", default="", help="Why (kept in ZooKeeper with the decision).")
@click.pass_context
@reports_errors
def set_accept_ddl(ctx: click.Context, name: str, table: str, new_topic: bool, reason: str) -> None:
    """Let set NAME's relay go on past the DDL of TABLE (schema.table, or a table name unique in the set) it
    waits at.

    Default: the new value schema is registered regardless of compatibility, in the same topic
    (a SCHEMA_CHANGED record marks the place; refused for a change of the key). --new-topic: the
    table goes on in a new topic generation, filled by an online snapshot (a TOPIC_CHANGED record
    marks the place). The decision applies exactly at the change; it is kept in ZooKeeper.
    """
    with _store(ctx) as store:
        stop = accept_ddl.accept(store, name, table, new_topic, reason)
        record, _ = store.get_set(name)
    click.echo(accept_ddl.describe(name, stop, new_topic, record))


@set_group.command("drop")
@click.argument("name")
@click.pass_context
@reports_errors
def set_drop(ctx: click.Context, name: str) -> None:
    """Drop set NAME: triggers, consumer, queue (logical: its replication slot), then its znodes."""
    with _store(ctx) as store:
        done = admin.drop_set(store, name)
    click.echo(f"dropped set {name!r}: " + "; ".join(done))


@set_group.command("verify")
@click.argument("name")
@kafka_options
@registry_options("Avro sets")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="First wait until the relay has relayed every committed change.")
@click.pass_context
@reports_errors
def set_verify(ctx: click.Context, name: str, kafka: KafkaSettings, registry: RegistrySettings | None,
               wait: bool) -> None:
    """Check that the state rebuilt from the set's topics equals its tables.

    Run it while nothing writes to the tables. Exits 1 on any difference.
    """
    with _store(ctx) as store:
        record, _ = store.get_set(name)
        if wait:
            status.wait_caught_up(store, name, kafka)
    reports = verify.verify_set(record, kafka, registry)
    for r in reports:
        if r.note is not None:
            click.echo(f"{r.topic}: {r.table} {r.note}")
            continue
        state = "ok" if r.ok else f"DIFFERENT: {r.first_difference}"
        click.echo(f"{r.topic}: {r.messages} messages, {r.rebuilt_rows} rows rebuilt, "
                   f"{r.source_rows} rows in {r.table}: {state}")
    if not all(r.ok for r in reports):
        raise SystemExit(1)


@set_group.command("snapshot")
@click.argument("name")
@click.option("--table", "tables", multiple=True, help="A table to snapshot: schema.table, or a table name unique "
              "in the set (docs/config.rst, 'Table names'); repeat it; all of the set's tables when none is given.")
@click.option("--where", default=None, help="An SQL condition: only rows matching it are snapshotted.")
@click.option("--chunk-size", default=DEFAULT_CHUNK_SIZE, show_default=True, help="Rows per chunk.")
@click.option("--pause", "action", flag_value="pause", help="Pause the running request.")
@click.option("--resume", "action", flag_value="resume", help="Resume a paused request.")
@click.option("--cancel", "action", flag_value="cancel", help="Cancel the request.")
@click.option("--status", "action", flag_value="status", help="Show the request and its progress.")
@click.pass_context
@reports_errors
def set_snapshot(ctx: click.Context, name: str, tables: tuple[str, ...], where: str | None, chunk_size: int,
                 action: str | None) -> None:
    """Snapshot tables of set NAME again while its relay streams (an online snapshot: key chunks
    between watermarks, rows as op r); or pause, resume, cancel or show the request."""
    with _store(ctx) as store:
        if action == "status":
            info = resnapshot.show(store, name)
        elif action is not None:
            req = resnapshot.change_state(store, name, resnapshot.STATES[action])
            click.echo(f"online snapshot {req.id} of set {name!r}: {req.state}")
            return
        else:
            req = resnapshot.request(store, name, list(tables), where, chunk_size)
            click.echo(f"online snapshot {req.id} of set {name!r} requested: {', '.join(req.tables)}")
            return
    for line in resnapshot.lines(info):
        click.echo(line)

