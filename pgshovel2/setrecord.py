"""The set record: a replication set as stored in ZooKeeper, typed, built in one place.

A set's znode (and each ``history/<n>`` znode) holds one JSON record::

    {"name", "cluster", "version", "config": SetConfig.to_dict(), "tables": [Table.to_dict()],
     "queue", "trigger", "consumer"            (trigger backend; None for logical),
     "capture"                                 (trigger backend: "c" | "plpgsql"; absent: "c"),
     "pgq"                                     (trigger: "extension" | "pl"; absent = extension),
     "slot", "plugin"                          (logical backend; plugin: pgshovel2_decoder
                                               or pgoutput, absent in older records: ours),
     "created_at", "upgraded_at", "pgshovel_version",
     "change": {"kind": "create"|"upgrade"|"ddl"|"drop"|"generation"|"repoint", ...},
     "retired": [{"table", "schema", "name", "topic", "generation", "why", "tick", "ordinal"}]  (absent: none)}

:meth:`SetRecord.from_node` reads it (as Patroni's ``ClusterConfig.from_node``) and
:meth:`SetRecord.to_node` writes the same layout, so records written by earlier versions
stay readable.
"""

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg2.extensions import make_dsn, parse_dsn

from pgshovel2 import __version__, names
from pgshovel2.catalog import Table, wire_table
from pgshovel2.config import SetConfig
from pgshovel2.controlsconf import ColumnControl
from pgshovel2.errors import ClusterError

CONSUMER = "pgshovel2_relay"  # the relay's PgQ consumer name on a trigger set's queue
PLUGIN = "pgshovel2_decoder"  # our output plugin (sql/decoder), read by a logical set's slot
PGOUTPUT = "pgoutput"  # PostgreSQL's own plugin, for servers without ours (config: decoder: pgoutput)


@dataclass(frozen=True)
class TriggerCapture:
    """Where a ``trigger`` set captures: its PgQ queue, trigger name and relay consumer.

    kind: which capture code its triggers run: ``c`` (the pgshovel2 extension, sql/capture)
    or ``plpgsql`` (schema pgshovel2_pl, sql/capture_pl). pgq: which PgQ the database has
    (``extension`` or ``pl``, PgQ's PL/pgSQL-only build; set create picks it,
    pgshovel2.backends.pgq_install). why: how set create chose the capture (not stored).
    """

    queue: str
    trigger: str
    consumer: str = CONSUMER
    kind: str = "c"
    pgq: str = "extension"
    why: str = field(default="", compare=False)

    @property
    def schema(self) -> str:
        """The schema of the capture functions: ``pgshovel2`` or ``pgshovel2_pl``."""
        return "pgshovel2_pl" if self.kind == "plpgsql" else "pgshovel2"

    def describe(self) -> str:
        """``queue <name>, capture <kind>`` for operators."""
        return f"queue {self.queue}, capture {self.kind}"

    def chosen(self) -> str:
        """``capture <kind>: <why>`` when set create chose the capture just now, else ""."""
        return f"capture {self.kind}: {self.why}" if self.why else ""


@dataclass(frozen=True)
class SlotCapture:
    """Where a ``logical`` set captures: its replication slot, read through plugin (PLUGIN or
    PGOUTPUT; a pgoutput set also has a publication named as its slot)."""

    slot: str
    plugin: str = PLUGIN

    def describe(self) -> str:
        """``slot <name>`` for operators."""
        return f"slot {self.slot}"

    def chosen(self) -> str:
        """"": a slot's plugin choice is in the record's change["decoder"]."""
        return ""


Capture = TriggerCapture | SlotCapture


def queue_name(cluster: str, set_name: str) -> str:
    """PgQ queue of a trigger set: ``pgshovel2.<cluster>.<set>``."""
    return f"pgshovel2.{cluster}.{set_name}"


def trigger_name(cluster: str, set_name: str) -> str:
    """Name of a trigger set's capture triggers (<= 63 bytes; the TRUNCATE one adds ``_t``)."""
    digest = hashlib.sha1(cluster.encode()).hexdigest()[:6]
    return f"pgshovel2_{set_name}_{digest}"


def slot_name(cluster: str, set_name: str) -> str:
    """Replication slot of a logical set: ``pgshovel2_<set, lower case>_<hash of cluster and set>``
    (slot names allow only ``[a-z0-9_]``, at most 63 bytes; the hash keeps sets whose names
    differ only in case, and clusters, apart)."""
    digest = hashlib.sha1(f"{cluster}/{set_name}".encode()).hexdigest()[:8]
    return f"pgshovel2_{set_name.lower()}_{digest}"


@dataclass(frozen=True)
class SetTopicNames:
    """The Kafka topics of a set (names escaped by :mod:`pgshovel2.names`).

    tables: table tag (``"schema"."table"``, as Table.qualified) -> data topic.
    """

    transactions: str
    positions: str
    tables: dict[str, str]
    dead_letter: str = ""  # the dead-letter topic (used with oversized policy dead-letter only)


@dataclass(frozen=True)
class SetRecord:
    """One version of a replication set (module docstring for the stored form).

    version: the set version (1 at create, +1 per upgrade, DDL or repoint). change: what made
    this version (``{"kind": ..., "gid": ...}``), None when not recorded. retired: data topics
    the set's tables no longer write, oldest first: a dropped table's (why ``dropped``) and a
    table's former topic generations (why ``new-topic``); tick and ordinal: the position where
    it ended (consumers still read them for what came before).
    """

    name: str
    cluster: str
    version: int
    config: SetConfig
    tables: tuple[Table, ...]
    capture: Capture
    created_at: float
    pgshovel_version: str = __version__
    upgraded_at: float | None = None
    change: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer versions, kept as read
    retired: tuple[dict[str, Any], ...] = ()

    @classmethod
    def new(cls, cluster: str, name: str, config: SetConfig, tables: tuple[Table, ...],
            change: dict[str, Any] | None = None, plugin: str = PLUGIN) -> "SetRecord":
        """Version 1 of a set, with the capture names of its backend (plugin: a logical set's)."""
        capture: Capture
        if config.backend == "logical":
            capture = SlotCapture(slot_name(cluster, name), plugin)
        else:
            capture = TriggerCapture(queue_name(cluster, name), trigger_name(cluster, name))
        return cls(name, cluster, 1, config, tables, capture, time.time(), change=change)

    @property
    def backend(self) -> str:
        """``trigger`` or ``logical``."""
        return self.config.backend

    @property
    def logical(self) -> bool:
        """True for a logical set (it reads a replication slot), False for a trigger set."""
        return isinstance(self.capture, SlotCapture)

    @property
    def plugin(self) -> str | None:
        """A logical set's output plugin (PLUGIN or PGOUTPUT); None for a trigger set."""
        return self.capture.plugin if isinstance(self.capture, SlotCapture) else None

    @property
    def dsn(self) -> str:
        """libpq DSN of the set's database, as the admin role reaches it (set create, upgrade, drop)."""
        return self.config.dsn

    @property
    def relay_dsn(self) -> str:
        """libpq DSN of the relay role: the keywords of ``database.relay_dsn`` laid over :attr:`dsn`
        (so a repoint, which changes dsn's host, moves it too; a relay_dsn naming its user without a
        password leaves out dsn's password); :attr:`dsn` when the config has none.
        What only reads and acknowledges connects with it: the relay (its source, snapshots, online
        snapshots, partition watch) and the consumers' reads of the tables (bootstraps, verify)."""
        if not self.config.relay_dsn:
            return self.config.dsn
        relay = parse_dsn(self.config.relay_dsn)
        base = parse_dsn(self.config.dsn)
        if "user" in relay and "password" not in relay:
            base.pop("password", None)  # the admin role's: the relay role's comes from libpq (.pgpass, ...)
        return make_dsn(**{**base, **relay})

    @property
    def publication(self) -> str | None:
        """The publication a pgoutput set reads: the DBA's (``publication: {existing: NAME}``), else its
        own, named as its slot; None for other sets."""
        if not isinstance(self.capture, SlotCapture) or self.capture.plugin != PGOUTPUT:
            return None
        return self.config.publication or self.capture.slot

    @property
    def owns_publication(self) -> bool:
        """True when the set made its publication (set upgrade alters it, set drop drops it); False for
        the DBA's existing one, which pgshovel2 only checks."""
        return self.publication is not None and not self.config.publication

    @property
    def prefix(self) -> str:
        """The topic prefix: the configured one, else the set name."""
        return self.config.topic_prefix or self.name

    @property
    def topics(self) -> SetTopicNames:
        """The set's topics."""
        return SetTopicNames(names.transactions_topic(self.prefix), names.positions_topic(self.prefix),
                             {t.qualified: self.topic(t) for t in self.tables}, names.dead_letter_topic(self.prefix))

    def topic(self, table: Table) -> str:
        """The data topic of a table of the set (of its generation: names.generation_topic)."""
        return names.generation_topic(names.table_topic(self.prefix, table.schema, table.name), table.generation)

    @property
    def queue(self) -> str:
        """The PgQ queue; raises ClusterError for a logical set."""
        if not isinstance(self.capture, TriggerCapture):
            raise ClusterError(f"set {self.name!r} is a {self.backend} set: it has no PgQ queue")
        return self.capture.queue

    @property
    def slot(self) -> str:
        """The replication slot; raises ClusterError for a trigger set."""
        if not isinstance(self.capture, SlotCapture):
            raise ClusterError(f"set {self.name!r} is a {self.backend} set: it has no replication slot")
        return self.capture.slot

    def controls_of(self, table: Table) -> tuple[ColumnControl, ...]:
        """The column controls the config gives table (by its schema and name as configured)."""
        return next((tc.controls for tc in self.config.tables if (tc.schema, tc.name) == (table.schema, table.name)),
                    ())

    @property
    def wire_tables(self) -> tuple[Table, ...]:
        """The set's tables as its messages carry them: a masked or hashed column (config controls)
        is text (catalog.wire_table). What reads the topics (tail, replicate, materialize) types
        values by these; what reads the database, by :attr:`tables`."""
        return tuple(wire_table(t, self.controls_of(t)) for t in self.tables)

    def table(self, tag: str) -> Table | None:
        """The table whose tag (Table.qualified) is tag, None if not in the set."""
        return next((t for t in self.tables if t.qualified == tag), None)

    def next(self, **changes: Any) -> "SetRecord":
        """The next version: version + 1, upgraded now by this package, with changes applied."""
        return replace(self, version=self.version + 1, upgraded_at=time.time(), pgshovel_version=__version__,
                       **changes)

    def replace(self, **changes: Any) -> "SetRecord":
        """A copy with changes applied (same version)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (module docstring)."""
        data: dict[str, Any] = {**self.extra, "name": self.name, "cluster": self.cluster, "version": self.version,
                                "config": self.config.to_dict(), "tables": [t.to_dict() for t in self.tables],
                                "queue": None, "trigger": None, "consumer": None,
                                "created_at": self.created_at, "pgshovel_version": self.pgshovel_version}
        if isinstance(self.capture, SlotCapture):
            data["slot"] = self.capture.slot
            data["plugin"] = self.capture.plugin
        else:
            data.update(queue=self.capture.queue, trigger=self.capture.trigger, consumer=self.capture.consumer,
                        capture=self.capture.kind, pgq=self.capture.pgq)
        if self.upgraded_at is not None:
            data["upgraded_at"] = self.upgraded_at
        if self.change is not None:
            data["change"] = self.change
        if self.retired:
            data["retired"] = list(self.retired)
        return data

    def to_node(self) -> bytes:
        """The znode bytes."""
        return json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SetRecord":
        """Inverse of :meth:`to_dict`. Raises ClusterError naming the set for a malformed record."""
        try:
            config = SetConfig.from_dict(data["config"])
            capture: Capture = (SlotCapture(data["slot"], data.get("plugin") or PLUGIN) if config.backend == "logical"
                                else TriggerCapture(data["queue"], data["trigger"], data.get("consumer") or CONSUMER,
                                                    data.get("capture") or "c", data.get("pgq") or "extension"))
            known = {"name", "cluster", "version", "config", "tables", "queue", "trigger", "consumer", "slot", "plugin",
                     "capture", "pgq", "created_at", "pgshovel_version", "upgraded_at", "change", "retired"}
            return cls(data["name"], data["cluster"], int(data["version"]), config,
                       tuple(Table.from_dict(t) for t in data["tables"]), capture, data["created_at"],
                       data.get("pgshovel_version", "0"), data.get("upgraded_at"), data.get("change"),
                       {k: v for k, v in data.items() if k not in known}, tuple(data.get("retired") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterError(f"malformed record of set {data.get('name')!r} in ZooKeeper: {exc!r}") from exc

    @classmethod
    def from_node(cls, data: bytes) -> "SetRecord":
        """A record from znode bytes. Raises ClusterError when they are not one."""
        try:
            return cls.from_dict(json.loads(data))
        except ValueError as exc:
            raise ClusterError(f"unreadable set record in ZooKeeper: {data[:200]!r}") from exc
