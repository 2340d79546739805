"""``pgshovel set upgrade``: change a running set's tables, columns and keys.

The new config is resolved against the catalog and compared with the stored
version (:func:`plan`); the database work (replace the triggers of changed
tables, create those of added ones, drop those of removed ones, then a
set-version marker in the queue) and the ZooKeeper update (next version,
checked against the version read) are one two-phase commit, so capture and
ZooKeeper switch together and the relay switches at the marker's exact place
in the stream. Two admins upgrading at once: the second gets ConflictError.

Logical sets (:mod:`pgshovel2.backends.logical_version`): the tables touched are locked
against writers, the publication's tables set (pgoutput) and a transactional
``pgshovel2.version`` message written in the same transaction: the relay (and our plugin)
switch at that message's place. Tables added are captured from the upgrade's commit on;
their existing rows come as the online snapshot the CLI requests after the upgrade
(:mod:`pgshovel2.ops.resnapshot`), unless ``--no-snapshot``.
"""

from dataclasses import dataclass, field, replace
from typing import Any

from pgshovel2.backends import lifecycle, partition_checks, partitions, pgoutput
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.config import SetConfig, load_config
from pgshovel2.db import connect
from pgshovel2.errors import CaptureError, ConfigError, RequestError
from pgshovel2.ops import setdiff, twophase
from pgshovel2.ops.setdiff import TableChange
from pgshovel2.ops.twophase import Intent
from pgshovel2.relay import ddl_gate
from pgshovel2.setrecord import SetRecord

# Changing these would change what existing topics mean: a new set is the way.
IMMUTABLE = {"dsn": "set repoint", "backend": "a new set", "encoding": "a new set",
             "envelope": "a new set", "topic_prefix": "a new set", "capture": "a new set", "publication": "a new set"}


@dataclass
class UpgradePlan:
    """What an upgrade from_version -> to_version changes (empty tables: nothing)."""

    set_name: str
    from_version: int
    to_version: int
    tables: list[TableChange]
    topics_created: list[str]
    triggers: list[str]
    logical: bool = False
    oversized: str | None = None  # the oversized policy's change ("fail -> dead-letter"), None: unchanged
    settings: list[str] = field(default_factory=list)  # other config fields that differ (setdiff.settings)

    @property
    def changes(self) -> bool:
        """True when the upgrade changes something (tables or the oversized policy)."""
        return bool(self.tables) or self.oversized is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``set upgrade --json``): set, from_version, to_version, changes (bool),
        tables (TableChange.to_dict each), oversized, settings, triggers (trigger sets), topics_created."""
        return {"set": self.set_name, "from_version": self.from_version, "to_version": self.to_version,
                "changes": self.changes, "tables": [t.to_dict() for t in self.tables], "oversized": self.oversized,
                "settings": self.settings,
                "triggers": [] if self.logical else self.triggers, "topics_created": self.topics_created}

    def lines(self) -> list[str]:
        """The diff as printable lines."""
        if not self.changes:
            out = [f"set {self.set_name!r}: version {self.from_version} already matches the config"]
            if self.settings:
                out[0] += "'s tables and oversized policy"
                out += [f"  not applied: {s} (an upgrade stores other settings only with a change of tables or "
                        "of the oversized policy)" for s in self.settings]
            return out
        out = [f"set {self.set_name!r}: version {self.from_version} -> {self.to_version}"]
        out += [f"  {t.describe()}" for t in self.tables]
        if self.oversized is not None:
            out.append(f"  oversized messages: {self.oversized} (from the version's place in the stream on)")
        out += [f"  setting stored with the version: {s}" for s in self.settings]
        if self.logical:
            out.append("  switch: a pgshovel2.version message (and the publication's tables, decoder pgoutput) "
                       "in the upgrade's transaction")
        else:
            out += [f"  trigger: {t}" for t in self.triggers]
        out += [f"  topic created by the relay: {t}" for t in self.topics_created]
        if any(t.kind == "added" for t in self.tables):
            out.append("  note: added tables are captured from the upgrade's commit on; their existing rows come "
                       "as an online snapshot the upgrade requests (unless --no-snapshot)")
        return out


def carried(record: SetRecord, tables: tuple[Table, ...]) -> tuple[Table, ...]:
    """tables (resolved from the catalog) with what the stored record's tables keep across an
    upgrade: a table renamed while relayed (found by its OID, named in the config by its name
    now) keeps its identity (tag, topic, Avro names; Table.renamed says where it is); every one
    keeps its topic generation, and its key layout (Table.key_layout) while the key is made of
    the same columns -- the key's schema, and every key's bytes, stay as they are."""
    old = {t.qualified: t for t in record.tables}
    by_oid = {t.oid: t for t in record.tables if t.oid is not None}
    out = []
    for table in tables:
        before = old.get(table.qualified)
        if before is None and table.oid in by_oid:
            before = by_oid[table.oid]
            table = replace(table, schema=before.schema, name=before.name, renamed=table.relation)
        if before is not None:
            same_key = [c.attnum for c in before.key_columns] == [c.attnum for c in table.key_columns]
            table = replace(table, generation=before.generation,
                            key_layout=before.key_layout if same_key and table.key else None)
        out.append(table)
    return tuple(out)


def waiting_at_ddl(store: ClusterStore, name: str) -> None:
    """Raise RequestError when the set's relay waits for a decision on a DDL (an upgrade's marker
    would wait behind it: the relay cannot reach it before the decision)."""
    stop = store.get_relay_record(name, ddl_gate.STOP)
    if stop is not None:
        raise RequestError(f"set {name!r}: its relay waits at a DDL of {stop['table']} at {stop['position']} "
                           f"({stop['reason']}); an upgrade's marker would wait behind it. Decide first: 'pgshovel "
                           f"set accept-ddl {name} TABLE [--new-topic]' (docs/runbooks.rst, 'Relay stopped on DDL'); "
                           "nothing written")


def diff(set_name: str, record: SetRecord, config: SetConfig, tables: tuple[Table, ...],
         old_rows: frozenset[str] = frozenset()) -> UpgradePlan:
    """The plan that takes the stored record to config/tables (resolved from the catalog).
    old_rows: tables (qualified names) whose capture trigger must be replaced even when the table is
    unchanged (:func:`pgshovel2.backends.trigger.without_old_rows`)."""
    tables = carried(record, tables)
    tags = {(t.schema, t.name): t.qualified for t in tables}
    controls = setdiff.control_changes(record.config, config, tags)
    changes = setdiff.table_changes(record.tables, tables, record.topic, record.topic, old_rows, controls)
    triggers, topics = [], []
    for change in changes:
        if change.kind == "added":
            triggers.append(f"create on {change.table}")
            topics.append(record.topic(next(t for t in tables if t.qualified == change.table)))
        elif change.kind == "removed":
            triggers.append(f"drop on {change.table} (its topic stays)")
        else:
            triggers.append(f"replace on {change.table}")
    policy = None
    if config.oversized != record.config.oversized:
        def text(o):
            return o.policy + (f" [{', '.join(o.columns)}]" if o.columns else "")
        policy = f"{text(record.config.oversized)} -> {text(config.oversized)}"
    return UpgradePlan(set_name, record.version, record.version + 1, changes, topics, triggers,
                       record.logical, policy, setdiff.settings(record.config, config))


def _check_immutable(old: SetConfig, new: SetConfig, source: str) -> None:
    for name, instead in IMMUTABLE.items():
        if getattr(old, name) != getattr(new, name):
            raise ConfigError(source, name, getattr(new, name),
                              f"cannot change on upgrade (stored: {getattr(old, name)!r}); use {instead}")
    if old.connect != new.connect:  # the topics' form (Debezium's Connect schemas or pgshovel2's)
        raise ConfigError(source, "debezium.schemas", new.debezium.schemas,
                          f"cannot change on upgrade (stored: {old.debezium.schemas}: the set's topics hold that "
                          "form; a set created before the option existed has false); write the stored value, or "
                          "use a new set")
    for mode in ("decimal_handling_mode", "interval_handling_mode", "binary_handling_mode"):
        if getattr(old.debezium, mode) != getattr(new.debezium, mode):  # the types of the topics' fields
            raise ConfigError(source, f"debezium.{mode}", getattr(new.debezium, mode),
                              f"cannot change on upgrade (stored: {getattr(old.debezium, mode)}: the set's "
                              "topics hold values of that form); write the stored value, or use a new set")


def plan(store: ClusterStore, name: str, config_path: str) -> UpgradePlan:
    """The upgrade's diff, computed from a read-only look at the catalog; changes nothing.

    Raises ConfigError (bad config, a field that cannot change), ClusterError
    (no such set), CaptureError (database unreachable, a privilege either role lacks for the new
    version, a DBA's publication that does not cover it).
    """
    record, _ = store.get_set(name)
    config = load_config(config_path)
    _check_immutable(record.config, config, config_path)
    return _preview(name, record, config, config_path)


def _preview(name: str, record: SetRecord, config: SetConfig, config_path: str) -> UpgradePlan:
    """The diff from record to config, resolved in a read-only transaction."""
    conn = connect(config.dsn, f"set {name!r}")
    try:
        conn.set_session(readonly=True)
        tables = _resolve(conn, name, record, config, config_path)
        with conn.cursor() as cur:
            _check_partitions(cur, record, tables, config_path)
            _check_roles(cur, record, config, tables, config_path)
        _check_control_types(record, config, tables, config_path)
        return diff(name, record, config, tables, _old_rows(conn, record, tables))
    finally:
        conn.rollback()
        conn.close()


STRING_KINDS = ("text", "varchar", "bpchar", "citext")  # columns whose values are strings with or without a mask


def _check_control_types(record: SetRecord, config: SetConfig, tables: tuple[Table, ...], source: str) -> None:
    """Raise ConfigError for a mask or hash added to or taken from a column of a kept table of an Avro
    set whose values are not strings: its field's type in the registered schema would change
    (a string instead of its type, or back), which BACKWARD compatibility refuses."""
    if config.encoding != "avro":
        return
    kept = {t.qualified for t in record.tables}
    for i, tc in enumerate(config.tables):
        table = next((t for t in tables if (t.schema, t.name) == (tc.schema, tc.name)), None)
        if table is None or table.qualified not in kept:
            continue
        old, new = _retyped(record.controls_of(table)), _retyped(tc.controls)
        for col in table.columns:
            if (col.name in old) != (col.name in new) and (col.kind not in STRING_KINDS or col.is_array):
                raise ConfigError(source, f"tables[{i}].controls.{col.name}", sorted(new & {col.name}) or "none",
                                  f"column {col.name!r} of {table.qualified} is {col.pg_type}: a mask or hash "
                                  f"{'added' if col.name in new else 'taken away'} changes its type in the "
                                  "topic's Avro schema, which BACKWARD compatibility refuses: relay the table "
                                  "with this control in a new set")


def _retyped(controls) -> set[str]:
    return {c.column for c in controls if c.action in ("mask", "hash")}


def _check_roles(cur, record: SetRecord, config: SetConfig, tables: tuple[Table, ...], config_path: str) -> None:
    """Raise CaptureError naming every privilege the admin role (cur's) or the relay role lacks for
    the new version (pgshovel2.backends.privileges.missing, as set create), and every way a DBA's
    publication (publication.existing) does not cover its tables."""
    problems = lifecycle.missing_privileges(cur, record, config)
    if problems:
        raise CaptureError(f"{config_path}: {len(problems)} missing privilege(s) in the set's database (see "
                           "'pgshovel set create --print-grants CONFIG'):\n  " + "\n  ".join(problems))
    if config.publication:
        pgoutput.check_existing(cur, config.publication, tables)


def _resolve(conn, name: str, record: SetRecord, config: SetConfig, config_path: str) -> tuple[Table, ...]:
    """config's tables as record's set's path carries them (backends.lifecycle.resolve_tables)."""
    return lifecycle.resolve_tables(conn, name, config, config_path, record.plugin)


def _old_rows(conn, record: SetRecord, tables: tuple[Table, ...]) -> frozenset[str]:
    """The unkeyed tables of a trigger set, kept by the upgrade, whose triggers the upgrade replaces
    (backends.lifecycle.without_old_rows). Empty for a logical set."""
    return lifecycle.without_old_rows(conn, record, tables)


@twophase.retry_on_deadlock
def upgrade_set(store: ClusterStore, name: str, config_path: str) -> UpgradePlan:
    """Apply config_path to set name as its next version (see the module doc); returns the plan.

    Nothing is written when the config matches the stored version. Raises
    ConflictError (someone else upgraded first), ConfigError, ClusterError,
    CaptureError; on any error neither side changed.
    """
    record, znode_version = store.get_set(name)
    waiting_at_ddl(store, name)
    config = load_config(config_path)
    _check_immutable(record.config, config, config_path)
    preview = _preview(name, record, config, config_path)
    if not preview.changes:
        return preview
    intent = Intent.new(store.cluster, name, "upgrade", record.version + 1)
    what = f"upgrade set {name!r}"
    with twophase.prepared_command(store, intent, config.dsn, what) as (conn, cur):
        tables = carried(record, _resolve(conn, name, record, config, config_path))
        _check_partitions(cur, record, tables, config_path)
        result = diff(name, record, config, tables, _old_rows(conn, record, tables))
        lifecycle.upgrade(cur, record, config, tables, {c.table for c in result.tables}, result.to_version, config_path)
        new_record = record.next(config=config, tables=tables, change={"kind": "upgrade", "gid": intent.gid})
        twophase.plan(store, intent, {"op": "update", "record": new_record.to_dict(), "znode_version": znode_version})
    twophase.finish(store, intent, config.dsn, lambda: store.update_set(new_record, znode_version), what)
    return result


def _check_partitions(cur, record: SetRecord, tables: tuple[Table, ...], source: str) -> None:
    """Raise ConfigError for tables of the new version that overlap through partitions
    (pgshovel2.backends.partition_checks)."""
    partition_checks.check(cur, tables, partitions.base_name(record), partitions.publication(record), source)
