"""Replication-set configuration: the YAML model, loading and validation.

A set config is a YAML mapping (see configs/pgbench.yaml)::

    database:
      dsn: "host=... dbname=..."   # set create/upgrade/drop (the admin role)
      relay_dsn: "user=cdc_relay"  # optional: libpq keywords laid over dsn for whatever only
                                   # reads and acknowledges (the relay, snapshots, consumers'
                                   # bootstraps and verify: the relay role); default: dsn itself
    publication:                # logical sets with decoder pgoutput: optional
      existing: cdc_pub         # a publication the DBA made and keeps; never altered or dropped
    backend: trigger            # trigger (PgQ) | logical (WAL)
    capture: plpgsql            # trigger backend: c (sql/capture) | plpgsql (sql/capture_pl);
                                # default: c when the server has the pgshovel2 extension
    pgq: auto                   # trigger: auto | extension | pl (PgQ's PL/pgSQL-only build)
    decoder: pgoutput           # logical only: pgshovel2 (our plugin, sql/decoder) | pgoutput
                                # (stock servers); default: pgshovel2 where its extension is available
    encoding: avro              # avro | json
    envelope: row               # row (Bottled Water compatible) | debezium
    debezium: {schemas: true}   # envelope debezium: Debezium's Connect schemas and value forms (true,
                                # default; JSON: JsonConverter's schema + payload, Avro: as Connect's
                                # AvroConverter registers them) or pgshovel2's own schemas and values;
                                # skipped_operations: [t] (default, as Debezium) or [] (op t events);
                                # unchanged_toast: placeholder (default: unavailable_value_placeholder,
                                # __debezium_unavailable_value) | header (null); decimal_handling_mode:
                                # precise | string | double, interval_handling_mode: numeric | string,
                                # binary_handling_mode: bytes | base64 | base64-url-safe | hex
    topic_prefix: pgbench       # default: the set name
    topics: {create: true, partitions: 1, replication_factor: 1}
    oversized:                  # a change whose message Kafka cannot take (over max.message.bytes)
      policy: fail              # fail (default) | dead-letter | truncate
      columns: [body]           # truncate only: the text/varchar/bytea columns that may be cut
    tables:
      - name: public.pgbench_accounts  # schema.table, or a table of schema public; a part holding
                                # a dot in double quotes (docs/config.rst, pgshovel2.tablenames)
        columns: [aid, abalance]   # optional subset; key columns are always captured
        key: [aid]              # optional key override
        allow_unkeyed: false
        controls: {email: {hash: env:PII_SALT}, ssn: {mask: 4}}  # pgshovel2.controlsconf

This module checks structure only; checks against the live catalog are in
:mod:`pgshovel2.catalog`. Every failure is a :class:`ConfigError` naming the
file, the field and the value.
"""

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pgshovel2 import configmodel, controlsconf, debeziumconf, heartbeatconf, redact, tablenames
from pgshovel2.configmodel import BACKENDS, CAPTURES, DECODERS, ENCODINGS, ENVELOPES, OVERSIZED_POLICIES, PGQ_MODES
from pgshovel2.controlsconf import ColumnControl
from pgshovel2.debeziumconf import STORED_FORM, DebeziumConfig
from pgshovel2.errors import ConfigError, ConfigProblemsError
from pgshovel2.heartbeatconf import HeartbeatConfig

SET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
CLUSTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class TableConfig:
    """One table of a set, as configured (names are exact identifiers)."""

    schema: str
    name: str
    columns: tuple[str, ...] | None = None
    key: tuple[str, ...] | None = None
    allow_unkeyed: bool = False
    controls: tuple[ColumnControl, ...] = ()  # pgshovel2.controlsconf

    @property
    def all_columns(self) -> bool:
        """True when every column is captured, also those added later (no columns list, no column
        excluded)."""
        return self.columns is None and not controlsconf.excluded(self.controls)


@dataclass(frozen=True)
class TopicsConfig:
    """How the relay creates missing topics."""

    create: bool = True
    partitions: int = 1
    replication_factor: int = 1


@dataclass(frozen=True)
class OversizedConfig:
    """What the relay does with a change whose message Kafka cannot take (larger than the
    topic's ``max.message.bytes`` or the producer's ``message.max.bytes``): ``fail`` (stop
    naming it; ``pgshovel set skip`` gets past it), ``dead-letter`` (the message to the set's
    ``{prefix}.dead-letter`` topic, a placeholder in its place) or ``truncate`` (cut the named
    text/varchar/bytea columns, of any table of the set that has them, until it fits)."""

    policy: str = "fail"
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SetConfig:
    """A replication set's configuration, validated for structure."""

    dsn: str
    tables: tuple[TableConfig, ...]
    backend: str = "trigger"
    encoding: str = "avro"
    envelope: str = "row"
    topic_prefix: str | None = None
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    capture: str | None = None  # c | plpgsql; None: chosen at set create (backends.trigger)
    pgq: str = "auto"
    decoder: str | None = None  # logical: "pgshovel2" | "pgoutput"; None: chosen by set create
    oversized: OversizedConfig = field(default_factory=OversizedConfig)
    relay_dsn: str | None = None  # libpq keywords laid over dsn for the relay role (SetRecord.relay_dsn)
    publication: str | None = None  # pgoutput: the DBA's existing publication (None: the set's own)
    debezium: DebeziumConfig = field(default_factory=DebeziumConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)  # logical: the action query

    @property
    def connect(self) -> bool:
        """Debezium events with Debezium's Connect schemas (envelope debezium, debezium.schemas)."""
        return self.envelope == "debezium" and self.debezium.schemas

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, as stored in ZooKeeper (debezium with its :data:`STORED_FORM`)."""
        out = asdict(self)
        out["debezium"]["form"] = STORED_FORM
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SetConfig":
        """Inverse of :meth:`to_dict` (data from ZooKeeper, already valid)."""
        tables = tuple(
            TableConfig(
                schema=t["schema"], name=t["name"],
                columns=tuple(t["columns"]) if t["columns"] is not None else None,
                key=tuple(t["key"]) if t["key"] is not None else None,
                allow_unkeyed=t["allow_unkeyed"],
                controls=controlsconf.from_record(t.get("controls")),
            )
            for t in data["tables"]
        )
        return cls(
            dsn=data["dsn"], tables=tables, backend=data["backend"],
            encoding=data["encoding"], envelope=data["envelope"],
            topic_prefix=data["topic_prefix"], topics=TopicsConfig(**data["topics"]),
            capture=data.get("capture"),
            pgq=data.get("pgq", "auto"),  # records before the key existed: auto
            decoder=data.get("decoder"),
            oversized=OversizedConfig(**{**(oversized := data.get("oversized") or {}),  # absent before it existed
                                         "columns": tuple(oversized.get("columns", ()))}),
            relay_dsn=data.get("relay_dsn"),  # absent before it existed: the dsn serves both
            publication=data.get("publication"),
            # records before the option existed: their topics' schemaless form
            debezium=debeziumconf.from_record(data.get("debezium"), data["encoding"]),
            heartbeat=heartbeatconf.from_record(data.get("heartbeat")),
        )


def validate_set_name(name: str, where: str = "command line") -> str:
    """Return name if it is a valid set name, else raise ConfigError naming where it came from.

    Set names become ZooKeeper nodes, PgQ queue, slot and trigger names: a letter,
    then up to 39 letters, digits or underscores (no '/', '.', or anything a path
    or an identifier could be built from).
    """
    if not isinstance(name, str) or not SET_NAME.fullmatch(name):
        raise ConfigError(where, "set name", name,
                          "must be a letter followed by up to 39 letters, digits or '_'")
    return name


def validate_cluster_name(name: str, where: str = "command line") -> str:
    """Return name if it is a valid cluster name (a letter, then up to 63 letters, digits,
    '_' or '-': it becomes a ZooKeeper node and part of queue names), else raise ConfigError."""
    if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
        raise ConfigError(where, "cluster name", name,
                          "must be a letter followed by up to 63 letters, digits, '_' or '-'")
    return name


def load_config(path: str | Path) -> SetConfig:
    """Read and validate a YAML set config file.

    Raises ConfigError (file missing, malformed YAML, bad field) naming the file.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, "file", source, f"cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        raise ConfigError(source, where, text[:0], f"malformed YAML: {exc}") from exc
    return parse_config(data, source)


def parse_config(data: Any, source: str) -> SetConfig:
    """Validate a parsed YAML document; source names it in errors."""
    if not isinstance(data, dict):
        raise ConfigError(source, "(document)", data, "must be a mapping")
    if unknown := configmodel.unknown_fields(data, source):
        raise unknown[0] if len(unknown) == 1 else ConfigProblemsError(unknown)
    db = data.get("database")
    if not isinstance(db, dict) or not isinstance(db.get("dsn"), str) or not db["dsn"].strip():
        raise ConfigError(source, "database.dsn", redact.deep(db), "must be a non-empty libpq DSN string")
    no_secret(db["dsn"], source, "database.dsn")
    relay_dsn = _relay_dsn(db.get("relay_dsn"), source)
    backend = _choice(data, "backend", BACKENDS, source)
    pgq = _choice(data, "pgq", PGQ_MODES, source)
    if backend != "trigger" and "pgq" in data:
        raise ConfigError(source, "pgq", pgq, "only the trigger backend uses PgQ")
    decoder = data.get("decoder")
    if decoder is not None and (backend != "logical" or decoder not in DECODERS):
        raise ConfigError(source, "decoder", decoder, f"must be one of {', '.join(DECODERS)}, and only with "
                          "backend: logical")
    encoding = _choice(data, "encoding", ENCODINGS, source)
    envelope = _choice(data, "envelope", ENVELOPES, source)
    capture = _capture(data, backend, source)
    prefix = data.get("topic_prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ConfigError(source, "topic_prefix", prefix, "must be a non-empty string")
    tables = data.get("tables")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(source, "tables", tables, "must be a non-empty list")
    parsed = tuple(_parse_table(t, f"tables[{i}]", source) for i, t in enumerate(tables))
    seen: dict[tuple[str, str], int] = {}
    for i, t in enumerate(parsed):
        if (t.schema, t.name) in seen:
            raise ConfigError(source, f"tables[{i}]", f"{t.schema}.{t.name}",
                              f"duplicate of tables[{seen[(t.schema, t.name)]}]")
        seen[(t.schema, t.name)] = i
    return SetConfig(dsn=db["dsn"], tables=parsed, backend=backend, encoding=encoding,
                     envelope=envelope, topic_prefix=prefix,
                     topics=_parse_topics(data.get("topics", {}), source), capture=capture, pgq=pgq,
                     decoder=decoder, oversized=_parse_oversized(data.get("oversized", {}), source),
                     relay_dsn=relay_dsn, publication=_publication(data, backend, decoder, source),
                     debezium=debeziumconf.parse(data, envelope, source),
                     heartbeat=heartbeatconf.parse(data, backend, source))


def _relay_dsn(value: Any, source: str) -> str | None:
    """``database.relay_dsn``: None when absent, else a non-empty DSN holding no literal secret
    (no_secret: it is stored in ZooKeeper like database.dsn); its value is never echoed."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(source, "database.relay_dsn", "(not shown)", "must be a non-empty libpq DSN string")
    return no_secret(value, source, "database.relay_dsn")


def _publication(data: dict, backend: str, decoder: str | None, source: str) -> str | None:
    """``publication: {existing: NAME}``: NAME (a logical set read through pgoutput only), else None."""
    if "publication" not in data:
        return None
    value = data["publication"]
    if not isinstance(value, dict) or set(value) != configmodel.field("publication").keys():
        raise ConfigError(source, "publication", value, "must be a mapping {existing: <publication name>}")
    if backend != "logical" or decoder != "pgoutput":
        raise ConfigError(source, "publication", value, "applies to backend: logical with decoder: pgoutput only")
    return _ident(value["existing"], "publication.existing", source)


def no_secret(dsn: str, source: str, field: str = "dsn") -> str:
    """Return dsn if it holds no secret itself (a password or sslpassword, a key inline), else
    raise ConfigError naming source and field (the DSN shown redacted): the DSN of a set is
    stored in ZooKeeper, so its password must be a reference resolved where each process runs
    (``password=env:VAR`` / ``password=file:PATH``) or come from libpq (~/.pgpass, PGPASSWORD,
    a service file)."""
    keys = redact.literal_secrets(dsn)
    if keys:
        raise ConfigError(source, field, redact.dsn(dsn), f"holds its {' and '.join(keys)} itself, which would be "
                          "stored in ZooKeeper: write password=env:VAR or password=file:PATH (read where each "
                          "command and relay runs), or leave it out and use ~/.pgpass, PGPASSWORD or a service file")
    return dsn


def _choice(data: dict, key: str, choices: tuple[str, ...], source: str) -> str:
    value = data.get(key, choices[0])
    if value not in choices:
        raise ConfigError(source, key, value, f"must be one of {', '.join(choices)}")
    return value


def _capture(data: dict, backend: str, source: str) -> str | None:
    """The ``capture`` key: None when absent; only for the trigger backend."""
    if "capture" not in data:
        return None
    value = data["capture"]
    if value not in CAPTURES:
        raise ConfigError(source, "capture", value, f"must be one of {', '.join(CAPTURES)}")
    if backend != "trigger":
        raise ConfigError(source, "capture", value, "applies to the trigger backend only")
    return value


def _ident(value: Any, field_name: str, source: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, field_name, value, "must be a non-empty identifier string")
    if len(value.encode("utf-8")) > 63:
        raise ConfigError(source, field_name, value, "identifiers are at most 63 bytes")
    if "\x00" in value:
        raise ConfigError(source, field_name, value, "identifiers cannot contain NUL")
    return value


def _ident_list(value: Any, field_name: str, source: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ConfigError(source, field_name, value, "must be a non-empty list of column names")
    names = tuple(_ident(v, f"{field_name}[{i}]", source) for i, v in enumerate(value))
    if len(set(names)) != len(names):
        raise ConfigError(source, field_name, value, "lists a column twice")
    return names


def _parse_table(entry: Any, where: str, source: str) -> TableConfig:
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict):
        raise ConfigError(source, where, entry, "must be a table name or a mapping")
    unkeyed = entry.get("allow_unkeyed", False)
    if not isinstance(unkeyed, bool):
        raise ConfigError(source, f"{where}.allow_unkeyed", unkeyed, "must be true or false")
    schema, name = _table_name(entry, where, source)
    controls = controlsconf.parse(entry.get("controls"), where, source)
    if entry.get("columns") is not None and controlsconf.excluded(controls):
        raise ConfigError(source, f"{where}.controls", sorted(controlsconf.excluded(controls)),
                          "exclude with a columns list: leave the column out of columns instead")
    return TableConfig(
        schema=_ident(schema, f"{where}.schema", source),
        name=_ident(name, f"{where}.name", source),
        columns=_ident_list(entry.get("columns"), f"{where}.columns", source),
        key=_ident_list(entry.get("key"), f"{where}.key", source),
        allow_unkeyed=unkeyed,
        controls=controls,
    )


def _table_name(entry: dict, where: str, source: str) -> tuple[Any, Any]:
    """(schema, name) of a table entry: with ``schema`` given, name is the exact identifier; else
    name is ``schema.table`` or a table of schema public (pgshovel2.tablenames.split)."""
    name = entry.get("name")
    if "schema" in entry or not isinstance(name, str) or not name:
        return entry.get("schema", "public"), name
    try:
        schema, table = tablenames.split(name)
    except tablenames.TableNameError as exc:
        raise ConfigError(source, f"{where}.name", name, str(exc)) from exc
    return schema or "public", table


def _parse_topics(data: Any, source: str) -> TopicsConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, "topics", data, "must be a mapping")
    create = data.get("create", True)
    if not isinstance(create, bool):
        raise ConfigError(source, "topics.create", create, "must be true or false")
    ints = {}
    for key in ("partitions", "replication_factor"):
        value = data.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(source, f"topics.{key}", value, "must be a positive integer")
        ints[key] = value
    return TopicsConfig(create=create, **ints)


def _parse_oversized(data: Any, source: str) -> OversizedConfig:
    """The ``oversized`` mapping: policy one of OVERSIZED_POLICIES; columns (a non-empty list of
    column names) with policy truncate only, and required by it."""
    if not isinstance(data, dict):
        raise ConfigError(source, "oversized", data, "must be a mapping {policy: ..., columns: [...]}")
    policy = data.get("policy", OVERSIZED_POLICIES[0])
    if policy not in OVERSIZED_POLICIES:
        raise ConfigError(source, "oversized.policy", policy, f"must be one of {', '.join(OVERSIZED_POLICIES)}")
    columns = _ident_list(data.get("columns"), "oversized.columns", source) or ()
    if policy == "truncate" and not columns:
        raise ConfigError(source, "oversized.columns", data.get("columns"),
                          "policy truncate needs the text/varchar/bytea columns it may cut")
    if policy != "truncate" and columns:
        raise ConfigError(source, "oversized.columns", list(columns), "only policy truncate cuts columns")
    return OversizedConfig(policy, columns)
