"""Builds what the relay needs for a set: topics, schemas, encoders, routes."""

from pgshovel2 import names
from pgshovel2.catalog import Table
from pgshovel2.codec import avro
from pgshovel2.codec.avro import AvroWriter
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.config import SetConfig
from pgshovel2.errors import RelayError
from pgshovel2.relay.emitter import TableRoute
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


def routes(set_name: str, config: SetConfig, tables: tuple[Table, ...],
           registry: SchemaRegistry | None) -> tuple[dict[str, TableRoute], AvroWriter | None]:
    """(table tag -> TableRoute, transactions-topic writer or None for JSON).

    With Avro, registers every key/value schema (TopicNameStrategy subjects).
    Raises RelayError when Avro is configured without a registry.
    """
    prefix = config.topic_prefix or set_name
    use_avro = config.encoding == "avro"
    if use_avro and registry is None:
        raise RelayError(f"set {set_name!r} uses encoding avro: pass --schema-registry URL "
                         "(or PGSHOVEL_SCHEMA_REGISTRY)")
    out = {}
    for table in tables:
        topic = names.table_topic(prefix, table.schema, table.name)
        key_w = value_w = None
        if use_avro:
            value_schema = avro.value_schema(set_name, table)
            value_w = AvroWriter(value_schema, registry.register(f"{topic}-value", value_schema))
            key_schema = avro.key_schema(set_name, table)
            if key_schema is not None:
                key_w = AvroWriter(key_schema, registry.register(f"{topic}-key", key_schema))
        out[table.qualified] = TableRoute(table, topic, RowEncoder(table, use_avro, key_w, value_w))
    txn_writer = None
    if use_avro:
        txn_topic = names.transactions_topic(prefix)
        txn_writer = AvroWriter(avro.TRANSACTION_SCHEMA,
                                registry.register(f"{txn_topic}-value", avro.TRANSACTION_SCHEMA))
    return out, txn_writer
