"""What the relay needs for a set's tables: topics, schemas, encoders, envelopes, as routes
(:class:`TableRoute`: table tag -> where its changes go and how they are encoded)."""

from dataclasses import dataclass, field

from psycopg2.extensions import parse_dsn

from pgshovel2 import controlsconf
from pgshovel2.catalog import Table
from pgshovel2.codec import avro, connect_avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.connect import ConnectRowEncoder, table_schemas
from pgshovel2.codec.connect_modes import Modes
from pgshovel2.codec.controls import ColumnControls, controlled
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.db import connect
from pgshovel2.errors import RelayError
from pgshovel2.relay.emit import unavailable
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Envelope, RowEnvelope
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry


@dataclass
class TableRoute:
    """Where a table's changes go and how they are encoded (envelope default: row)."""

    table: Table
    topic: str
    encoder: RowEncoder
    envelope: Envelope = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.envelope is None:
            self.envelope = RowEnvelope(self.encoder)

def topics(record: SetRecord) -> dict[str, str]:
    """Topic name -> cleanup.policy for every topic of the set (positions topic included).

    Keyed tables get ``compact``; unkeyed ones ``delete`` (Kafka refuses null keys on
    compacted topics). The dead-letter topic (``delete``) with oversized policy dead-letter.
    """
    names_ = record.topics
    out = {names_.tables[t.qualified]: "compact" if t.key else "delete" for t in record.tables}
    out[names_.transactions] = "delete"
    out[names_.positions] = "compact"
    if record.config.oversized.policy == "dead-letter":
        out[names_.dead_letter] = "delete"
    return out


def database_name(dsn: str) -> str:
    """The database a DSN connects to: its ``dbname``, else asked from the server
    (libpq defaults: PGDATABASE, the user name, service files)."""
    try:
        dbname = parse_dsn(dsn).get("dbname")
    except Exception:  # psycopg2.ProgrammingError for a malformed DSN: let connect() report it
        dbname = None
    if dbname:
        return dbname
    conn = connect(dsn, "the set", RelayError)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_database()")
            return cur.fetchone()[0]
    finally:
        conn.close()


def routes(record: SetRecord, registry: SchemaRegistry | None
           ) -> tuple[dict[str, TableRoute], AvroWriter | None]:
    """(table tag -> TableRoute, transactions-topic writer or None for JSON) of a set record.

    With Avro, registers every key/value schema (TopicNameStrategy subjects;
    the value schema is the row record or, for envelope debezium, the
    Envelope record). Raises RelayError when Avro is configured without a registry.
    """
    config = record.config
    if config.encoding == "avro" and registry is None:
        raise RelayError(f"set {record.name!r} uses encoding avro: pass --schema-registry URL "
                         "(or PGSHOVEL_SCHEMA_REGISTRY)")
    database = database_name(config.dsn) if config.envelope == "debezium" else ""
    out = {t.qualified: _route(record, t, registry, database) for t in record.tables}
    txn_writer = None
    if config.encoding == "avro":
        txn_writer = _writer(registry, f"{record.topics.transactions}-value", avro.TRANSACTION_SCHEMA)
    return out, txn_writer


def table_route(record: SetRecord, table: Table, registry: SchemaRegistry | None) -> TableRoute:
    """One table's route (its schemas registered), as :func:`routes` builds it."""
    database = database_name(record.dsn) if record.config.envelope == "debezium" else ""
    return _route(record, table, registry, database)


def _writer(registry: SchemaRegistry | None, subject: str, schema: dict | None) -> AvroWriter | None:
    """A writer for schema registered under subject; None without a registry or schema (JSON, unkeyed)."""
    if registry is None or schema is None:
        return None
    return AvroWriter(schema, registry.register(subject, schema))


def table_controls(record: SetRecord, table: Table) -> ColumnControls | None:
    """The column controls of record's table (codec.controls.controlled), its hash salts read here
    (where the relay or verify runs). Raises SecretReferenceError naming the column and the salt's
    reference."""
    configured = record.controls_of(table)
    return controlled(table, configured, controlsconf.salts(configured, table.qualified))


def _route(record: SetRecord, table: Table, registry: SchemaRegistry | None, database: str) -> TableRoute:
    """One table's route: its encoder and envelope, value schema registered before the key's."""
    set_name, config, topic = record.name, record.config, record.topic(table)
    controls = table_controls(record, table)
    table = controls.table if controls is not None else table  # what the schemas describe
    use_avro = config.encoding == "avro"
    avro_registry = registry if use_avro else None
    envelope: Envelope
    if config.envelope == "debezium":
        dbz = config.debezium
        connect, modes = dbz.schemas, Modes(dbz.decimal_handling_mode, dbz.interval_handling_mode,
                                            dbz.binary_handling_mode)
        env_w = _writer(avro_registry, f"{topic}-value", connect_avro.value_schema(topic, table, modes) if connect
                        else avro.debezium_value_schema(set_name, table))
        key_w = _writer(avro_registry, f"{topic}-key", connect_avro.key_schema(topic, table, modes) if connect
                        else avro.key_schema(set_name, table))
        if connect and use_avro:
            encoder = connect_avro.encoder(table, topic, key_w, modes, controls)
        elif connect:
            encoder = ConnectRowEncoder(table, table_schemas(topic, table, modes=modes), controls=controls)
        else:
            encoder = RowEncoder(table, use_avro, key_w, None, controls)
        form = unavailable.CONNECT if connect else unavailable.AVRO if use_avro else unavailable.JSON
        envelope = DebeziumEnvelope(encoder, SourceInfo(set_name, database, table.schema, table.name),
                                    topic, env_w, truncate_events=dbz.truncate_events,
                                    placeholders=unavailable.placeholders(table, dbz.placeholder, form, modes))
    else:
        value_w = _writer(avro_registry, f"{topic}-value", avro.value_schema(set_name, table))
        key_w = _writer(avro_registry, f"{topic}-key", avro.key_schema(set_name, table))
        encoder = RowEncoder(table, use_avro, key_w, value_w, controls)
        envelope = RowEnvelope(encoder)
    return TableRoute(table, topic, encoder, envelope)
