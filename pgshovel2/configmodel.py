"""The fields of a set config, declared once: the parser (:mod:`pgshovel2.config`,
:mod:`pgshovel2.debeziumconf`) takes its allowed fields and allowed values from :data:`FIELDS`,
and docs/config.rst is generated from it (scripts/config_doc.py; tests/unit/test_config_doc.py
fails when the page drifts), so the reference cannot name a field the parser does not know.

:func:`unknown_fields` walks a parsed YAML document and returns every field the model does not
have, each as a :class:`ConfigError` naming the file and the field's path.
"""

from dataclasses import dataclass
from typing import Any

from pgshovel2.errors import ConfigError

# Allowed values; the first of each is the default where the field has one.
BACKENDS = ("trigger", "logical")
CAPTURES = ("c", "plpgsql")  # trigger backend: C extension pgshovel2 or PL/pgSQL pgshovel2_pl
PGQ_MODES = ("auto", "extension", "pl")
DECODERS = ("pgshovel2", "pgoutput")
ENCODINGS = ("avro", "json")
ENVELOPES = ("row", "debezium")
OVERSIZED_POLICIES = ("fail", "dead-letter", "truncate")
# envelope debezium: Debezium's value modes (codec.connect_modes); the first of each is Debezium's default
DECIMAL_MODES = ("precise", "string", "double")
INTERVAL_MODES = ("numeric", "string")
BINARY_MODES = ("bytes", "base64", "base64-url-safe", "hex")
UNCHANGED_TOAST = ("placeholder", "header")
UNAVAILABLE_VALUE_PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's unavailable.value.placeholder
SKIPPABLE = ("t",)  # Debezium's skipped.operations that pgshovel2 honours: only truncate events


@dataclass(frozen=True)
class Field:
    """One field of a set config.

    name: its key; kind: the YAML type (``string``, ``boolean``, ``integer``, ``list of strings``,
    ``mapping``, ``list``); default: the value when absent, as the reference shows it (``None``:
    required); doc: what it means; example: one YAML line (or lines) using it, as written at
    its place in the file; choices: the allowed values (empty: any of kind); fields: the fields of
    a mapping (or of each entry of a list of mappings).
    """

    name: str
    kind: str
    default: str | None
    doc: str
    example: str
    choices: tuple[str, ...] = ()
    fields: tuple["Field", ...] = ()

    def keys(self) -> set[str]:
        """The names of its nested fields."""
        return {f.name for f in self.fields}


_DATABASE = (
    Field("dsn", "string", None, "libpq connection string of the set's database, for set create, upgrade and drop "
          "(the admin role). A password is a reference (password=env:VAR or password=file:PATH) or comes from "
          "~/.pgpass, PGPASSWORD or a service file: the DSN is stored in ZooKeeper.",
          'dsn: "host=db1 dbname=shop user=cdc_admin"'),
    Field("relay_dsn", "string", "(dsn)", "libpq keywords laid over dsn for whatever only reads and acknowledges "
          "(the relay, snapshots, consumers' bootstraps, set verify): the relay role. No literal password.",
          'relay_dsn: "user=cdc_relay"'),
)
_PUBLICATION = (
    Field("existing", "string", None, "A publication the DBA made and keeps; never altered or dropped.",
          "existing: cdc_pub"),
)
_TOPICS = (
    Field("create", "boolean", "true", "Whether the relay creates missing topics.", "create: false"),
    Field("partitions", "integer", "1", "Partitions of the topics the relay creates (a positive integer).",
          "partitions: 3"),
    Field("replication_factor", "integer", "1", "Replication factor of the topics the relay creates.",
          "replication_factor: 3"),
)
_OVERSIZED = (
    Field("policy", "string", OVERSIZED_POLICIES[0], "What the relay does with a change whose message Kafka cannot "
          "take (over max.message.bytes): fail (stop, naming it; 'pgshovel set skip' gets past it), dead-letter "
          "(the message to {prefix}.dead-letter, a placeholder in its place) or truncate (cut the columns named in "
          "columns until it fits).", "policy: dead-letter", OVERSIZED_POLICIES),
    Field("columns", "list of strings", "[]", "policy truncate only, and required by it: the text, varchar or "
          "bytea columns (of any table of the set that has them) that may be cut.", "columns: [body, notes]"),
)
_DEBEZIUM = (
    Field("schemas", "boolean", "true", "Debezium's Connect schemas and value forms (JSON: JsonConverter's schema "
          "+ payload; Avro: as Connect's AvroConverter registers them); false: pgshovel2's own schemas and values. "
          "Cannot change on upgrade.", "schemas: false"),
    Field("skipped_operations", "list of strings", "[t]", "Debezium's skipped.operations: [t] writes no op t events "
          "for TRUNCATE (the transactions topic's TRUNCATE record only); [] writes one per truncated table "
          "(encoding json only). c, u and d are never skipped.", "skipped_operations: []", SKIPPABLE),
    Field("unchanged_toast", "string", UNCHANGED_TOAST[0], "What an UPDATE's unchanged TOASTed value (not in the "
          "WAL) becomes in after: placeholder (unavailable_value_placeholder) or header (null); the "
          "pgshovel.unchanged header names the columns either way.", "unchanged_toast: header", UNCHANGED_TOAST),
    Field("unavailable_value_placeholder", "string", UNAVAILABLE_VALUE_PLACEHOLDER, "Debezium's "
          "unavailable.value.placeholder (unchanged_toast: placeholder only).",
          "unavailable_value_placeholder: __unchanged"),
    Field("decimal_handling_mode", "string", DECIMAL_MODES[0], "Debezium's decimal.handling.mode: the form of "
          "numeric and money values (schemas: true only; cannot change on upgrade).",
          "decimal_handling_mode: string", DECIMAL_MODES),
    Field("interval_handling_mode", "string", INTERVAL_MODES[0], "Debezium's interval.handling.mode: the form of "
          "interval values (schemas: true only; cannot change on upgrade).",
          "interval_handling_mode: string", INTERVAL_MODES),
    Field("binary_handling_mode", "string", BINARY_MODES[0], "Debezium's binary.handling.mode: the form of bytea "
          "values (schemas: true only; cannot change on upgrade).", "binary_handling_mode: hex", BINARY_MODES),
)
_TABLE = (
    Field("name", "string", None, "The table: schema.table, or a table name alone (schema public, or schema when "
          "given). With schema given, name is the exact identifier, dots included; without it, a part holding a "
          'dot or a double quote is written in double quotes ("my.table", with "" for a quote). An entry may also '
          "be just this string.", "name: sales.orders"),
    Field("schema", "string", "public", "The table's schema, as an exact identifier (name is then taken as it is).",
          "schema: sales"),
    Field("columns", "list of strings", "(all)", "The columns to capture (exact names); the key columns are always "
          "captured.", "columns: [id, status, total]"),
    Field("key", "list of strings", "(primary key)", "The columns of the messages' key, overriding the primary key "
          "(or replica identity index).", "key: [order_no]"),
    Field("allow_unkeyed", "boolean", "false", "Accept a table without a key: its changes go with a null key.",
          "allow_unkeyed: true"),
    Field("controls", "mapping", "(none)", "What becomes of a column's values before they leave the relay, one "
          "control per column (as Debezium's column.exclude.list, column.mask.with.N.chars, "
          "column.mask.hash.v2.SHA-256.with.salt and column.truncate.to.N.chars): ``exclude`` (never captured; "
          "columns added later join only by set upgrade), ``{mask: N}`` (every non-null value becomes N ``*``, a "
          "string), ``{hash: env:VAR | file:PATH}`` (the lowercase hex SHA-256 of the salt followed by the value's "
          "text: equal values hash equal, so joins still work; the column becomes a string; allowed on key "
          "columns) or ``{truncate: N}`` (text, varchar and char values cut to N characters). Exclude, mask and "
          "truncate are refused on key columns. Applied on every path: changes, snapshots, online snapshots and "
          "bootstraps, in the values and in the schemas.",
          "controls:\n  password_hash: exclude\n  ssn: {mask: 4}\n  email: {hash: env:PII_SALT}\n"
          "  bio: {truncate: 100}"),
)
_HEARTBEAT = (
    Field("interval", "duration", "10s", "Time between two runs of action_query: seconds, or a number with ms, s, "
          "m or h.", "interval: 30s"),
    Field("action_query", "string", None, "The SQL statement the active relay runs in the set's database, in a "
          "connection of its own with search_path pg_catalog, pg_temp (qualify every name), e.g. an upsert into "
          "a captured heartbeat table. A failure is shown in set status, never fatal.",
          "action_query: \"INSERT INTO ops.heartbeat (id, at) VALUES (1, now()) "
          "ON CONFLICT (id) DO UPDATE SET at = now()\""),
)
FIELDS: tuple[Field, ...] = (
    Field("database", "mapping", None, "Where the set's tables are.", "database:\n  dsn: \"dbname=shop\"",
          fields=_DATABASE),
    Field("backend", "string", BACKENDS[0], "How changes are captured: trigger (capture triggers into a PgQ queue) "
          "or logical (a replication slot). Cannot change on upgrade.", "backend: logical", BACKENDS),
    Field("capture", "string", "(c where the server has the pgshovel2 extension, else plpgsql)", "trigger backend "
          "only: the capture triggers' implementation, C (sql/capture) or PL/pgSQL (works on stock servers).",
          "capture: plpgsql", CAPTURES),
    Field("pgq", "string", PGQ_MODES[0], "trigger backend only: the PgQ used: auto, the pgq extension, or pl "
          "(PgQ's PL/pgSQL-only build, installed by set create).", "pgq: pl", PGQ_MODES),
    Field("decoder", "string", "(pgshovel2 where its extension is available, else pgoutput)", "logical backend "
          "only: the output plugin, pgshovel2 (ours, sql/decoder) or pgoutput (stock servers).",
          "decoder: pgoutput", DECODERS),
    Field("publication", "mapping", "(the set's own publication)", "logical backend with decoder pgoutput only: "
          "use a publication the DBA keeps.", "publication:\n  existing: cdc_pub", fields=_PUBLICATION),
    Field("encoding", "string", ENCODINGS[0], "The messages' encoding; avro needs a schema registry. Cannot change "
          "on upgrade.", "encoding: json", ENCODINGS),
    Field("envelope", "string", ENVELOPES[0], "The messages' form: row (Bottled Water compatible) or debezium "
          "(docs/wire.rst). Cannot change on upgrade.", "envelope: debezium", ENVELOPES),
    Field("debezium", "mapping", "(the defaults below)", "envelope debezium only: which of Debezium's forms the "
          "events take.", "debezium:\n  schemas: true", fields=_DEBEZIUM),
    Field("heartbeat", "mapping", "(none)", "logical backend only: Debezium's heartbeat.action.query, a statement "
          "the relay runs every interval so a database whose captured tables see no writes still shows the set "
          "alive in Kafka (the relay's own heartbeat keeps the slot moving without it).",
          "heartbeat:\n  interval: 10s\n  action_query: \"UPDATE ops.heartbeat SET at = now()\"",
          fields=_HEARTBEAT),
    Field("topic_prefix", "string", "(the set name)", "First part of every topic of the set "
          "({prefix}.{schema}.{table}, {prefix}.transactions, ...). Cannot change on upgrade.",
          "topic_prefix: shop"),
    Field("topics", "mapping", "(the defaults below)", "How the relay creates missing topics.",
          "topics:\n  partitions: 3", fields=_TOPICS),
    Field("oversized", "mapping", "(the defaults below)", "Messages Kafka cannot take.",
          "oversized:\n  policy: dead-letter", fields=_OVERSIZED),
    Field("tables", "list", None, "The set's tables (a non-empty list): each a name (a string) or a mapping of "
          "the fields below; a table may be listed once.", "tables:\n  - public.customers\n  - name: orders",
          fields=_TABLE),
)


def field(path: str) -> Field:
    """The field at a dotted path (``debezium``, ``tables``, ``topics.partitions``). Raises KeyError."""
    fields, found = FIELDS, None
    for part in path.split("."):
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            raise KeyError(path)
        fields = found.fields
    assert found is not None
    return found


def unknown_fields(data: Any, source: str) -> list[ConfigError]:
    """Every field of data (a parsed set config) the model does not have, in document order, each
    as a ConfigError naming source and the field's path (``tables[2].colums``)."""
    if not isinstance(data, dict):
        return []
    return _walk(data, FIELDS, "", source)


def _walk(data: dict, fields: tuple[Field, ...], where: str, source: str) -> list[ConfigError]:
    by_name = {f.name: f for f in fields}
    allowed = ", ".join(sorted(by_name))
    out = []
    for key, value in data.items():
        known = by_name.get(key)
        if known is None:
            out.append(ConfigError(source, f"{where}{key}", key, f"unknown field; allowed: {allowed}"))
        elif known.fields and isinstance(value, dict):
            out += _walk(value, known.fields, f"{where}{key}.", source)
        elif known.fields and known.kind == "list" and isinstance(value, list):
            for i, entry in enumerate(value):
                if isinstance(entry, dict):
                    out += _walk(entry, known.fields, f"{where}{key}[{i}].", source)
    return out
