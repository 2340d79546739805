"""Builds what the relay needs for a set: topics, schemas, encoders, envelopes, routes."""

from psycopg2.extensions import parse_dsn

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.config import SetConfig
from pgshovel2.db import connect
from pgshovel2.errors import RelayError
from pgshovel2.relay.emitter import TableRoute
from pgshovel2.relay.envelopes import DebeziumEnvelope, Envelope, RowEnvelope, SourceInfo
from pgshovel2.sinks.registry import SchemaRegistry


def topics(set_name: str, config: SetConfig, tables: tuple[Table, ...]) -> dict[str, str]:
    """Topic name -> cleanup.policy for every topic of the set.

    Keyed tables get ``compact``; unkeyed ones ``delete`` (Kafka refuses
    null keys on compacted topics).
    """
    prefix = config.topic_prefix or set_name
    out = {names.table_topic(prefix, t.schema, t.name): "compact" if t.key else "delete"
           for t in tables}
    out[names.transactions_topic(prefix)] = "delete"
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


def routes(set_name: str, config: SetConfig, tables: tuple[Table, ...],
           registry: SchemaRegistry | None) -> tuple[dict[str, TableRoute], AvroWriter | None]:
    """(table tag -> TableRoute, transactions-topic writer or None for JSON).

    With Avro, registers every key/value schema (TopicNameStrategy subjects;
    the value schema is the row record or, for envelope debezium, the
    Envelope record). Raises RelayError when Avro is configured without a registry.
    """
    prefix = config.topic_prefix or set_name
    use_avro = config.encoding == "avro"
    if use_avro and registry is None:
        raise RelayError(f"set {set_name!r} uses encoding avro: pass --schema-registry URL "
                         "(or PGSHOVEL_SCHEMA_REGISTRY)")
    database = database_name(config.dsn) if config.envelope == "debezium" else ""
    out = {}
    for table in tables:
        out[table.qualified] = _route(set_name, config, table, table_topic(set_name, config, table),
                                      registry, database)
    txn_writer = None
    if use_avro:
        txn_writer = _writer(registry, f"{names.transactions_topic(prefix)}-value", avro.TRANSACTION_SCHEMA)
    return out, txn_writer


def table_topic(set_name: str, config: SetConfig, table: Table) -> str:
    """The data topic of a table of the set."""
    return names.table_topic(config.topic_prefix or set_name, table.schema, table.name)


def table_route(set_name: str, config: SetConfig, table: Table, registry: SchemaRegistry | None) -> TableRoute:
    """One table's route (its schemas registered), as :func:`routes` builds it."""
    database = database_name(config.dsn) if config.envelope == "debezium" else ""
    return _route(set_name, config, table, table_topic(set_name, config, table), registry, database)


def _writer(registry: SchemaRegistry | None, subject: str, schema: dict | None) -> AvroWriter | None:
    """A writer for schema registered under subject; None without a registry or schema (JSON, unkeyed)."""
    if registry is None or schema is None:
        return None
    return AvroWriter(schema, registry.register(subject, schema))


def _route(set_name: str, config: SetConfig, table: Table, topic: str,
           registry: SchemaRegistry | None, database: str) -> TableRoute:
    """One table's route: its encoder and envelope, value schema registered before the key's."""
    use_avro = config.encoding == "avro"
    avro_registry = registry if use_avro else None
    envelope: Envelope
    if config.envelope == "debezium":
        env_w = _writer(avro_registry, f"{topic}-value", avro.debezium_value_schema(set_name, table))
        key_w = _writer(avro_registry, f"{topic}-key", avro.key_schema(set_name, table))
        encoder = RowEncoder(table, use_avro, key_w, None)
        envelope = DebeziumEnvelope(encoder, SourceInfo(set_name, database, table.schema, table.name),
                                    topic, env_w)
    else:
        value_w = _writer(avro_registry, f"{topic}-value", avro.value_schema(set_name, table))
        key_w = _writer(avro_registry, f"{topic}-key", avro.key_schema(set_name, table))
        encoder = RowEncoder(table, use_avro, key_w, value_w)
        envelope = RowEnvelope(encoder)
    return TableRoute(table, topic, encoder, envelope)
