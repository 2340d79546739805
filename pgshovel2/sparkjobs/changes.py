"""Decoding a set's Kafka messages into rows for the materialize job (pure
Python; runs inside Spark's Python workers).

A data message becomes ``physical values + (op, position, offset)``: the row
its value carries (the value itself, or a Debezium event's ``after``, else its
``before`` for a ``d`` event) or, for a tombstone, the key's fields -- an Avro
datum decoded without logical types (pgshovel2.consumer.decode), or a JSON
object read back to that datum (pgshovel2.codec.jsonback). Skipped: what the bootstrap holds
already -- every change its handoff covers (a txid snapshot: trigger backend,
or an LSN: logical backend, in their text form) and the snapshot rows (op
``r``) pgshovel2.txids.holds_snapshot_row says it holds (rows of the tables it
copied; for a logical set, only those emitted before its consistent point).
Other snapshot rows (a table added to the set later, an online snapshot after
a logical bootstrap) are applied like upserts. An unkeyed table's delete (op ``d``)
carries its whole row, and its Debezium UPDATE event becomes the old row's ``d`` then
the new row's ``u`` (as the row envelope sends them; pgshovel2.sparkjobs.multiset).
"""

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pgshovel2 import names, wire
from pgshovel2.catalog import Table
from pgshovel2.codec import jsonback
from pgshovel2.codec import spark as spark_codec
from pgshovel2.codec.connect import row_struct
from pgshovel2.consumer import connectjson
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.registryconf import Registry
from pgshovel2.txids import holds_snapshot_row, parse_handoff

OP, POSITION, OFFSET = "__pgshovel_op", "__pgshovel_position", "__pgshovel_offset"
UNCHANGED = "__pgshovel_unchanged"  # column names whose values the source did not log (pgshovel.unchanged)


def _headers(headers: Iterable[Any] | None) -> dict[str, str]:
    return {h[0]: (h[1].decode("utf-8") if h[1] is not None else None) for h in headers or ()}


def change_rows(table: Table, cols: list[spark_codec.SparkColumn], registry_url: Registry | None, handoff: str,
                copied: frozenset[str] | None = None, encoding: str = "avro", envelope: str = "row"):
    """mapPartitions function: Kafka rows (key, value, partition, offset, headers) of the table's
    topic -> physical rows of cols (spark_codec.columns of the table, or the batch's columns
    after DDL: pgshovel2.sparkjobs.evolve) + [op, position, offset, unchanged column names].
    copied: the ``schema.table`` names the bootstrap copied (None: every table). encoding
    (avro, json, avro-connect: materialize.wire) and envelope (row, debezium): the set's
    (docs/wire.rst); a JSON value is read
    back to its Avro datum by pgshovel2.codec.jsonback with table's columns (those of cols'
    set version). Raises ConsumerError naming a bad message."""
    name = f"{table.schema}.{table.name}"

    def convert(rows: Iterator[Any]) -> Iterator[list]:
        decoder, point = Decoder(registry_url, raw=True), parse_handoff(handoff)
        physical = _physical(table, cols, encoding)
        for row in rows:
            where = f"{table.qualified} message at partition {row['partition']} offset {row['offset']}"
            headers = _headers(row["headers"])
            try:
                op, txid, position = headers[wire.OP], int(headers[wire.TXID]), headers[wire.POSITION]
            except (KeyError, TypeError, ValueError) as exc:
                raise ConsumerError(f"{where}: missing or malformed pgshovel headers {headers!r}") from exc
            held = holds_snapshot_row(point, copied, name, position) if op == "r" else point.covers(txid, position)
            if held:
                continue
            if wire.DEAD_LETTER in headers:  # never a row: what it stands for is in the dead-letter topic
                raise ConsumerError(f"{where}: a placeholder for a message Kafka could not take (oversized policy "
                                    f"dead-letter, {headers[wire.DEAD_LETTER]}); materialize does not read dead "
                                    "letters: use the consumer library (SetReader reads them back) or skip it")
            value = decoder.decode(row["value"], f"the value of {where}")
            datum = _row_datum(value, envelope, where)
            deleted, fill = datum is None or op == "d", datum is not None
            if datum is None:
                datum = decoder.decode(row["key"], f"the key of {where}")
            if datum is None:
                continue  # an unkeyed delete of an older relay (no row): nothing identifies the row
            unchanged = unchanged_columns(headers, op, where)
            try:
                old = _old_unkeyed(table, value, op, envelope)
                if old is not None:  # the old row of an unkeyed table's Debezium UPDATE: its d first
                    yield [*physical(old, True), "d", position, row["offset"], []]
                values = physical(datum, fill)
            except ValueError as exc:
                raise ConsumerError(f"{where}: {exc}") from exc
            yield [*values, "d" if deleted else op, position, row["offset"], unchanged]
    return convert


def _old_unkeyed(table: Table, value: Any, op: str, envelope: str) -> Any:
    """The ``before`` of an unkeyed table's Debezium UPDATE event (which the row envelope sends as a
    message of its own, op d), else None."""
    if table.key or op != "u" or envelope != "debezium":
        return None
    return value.get("before")


def _physical(table: Table, cols: list[spark_codec.SparkColumn], encoding: str):
    """(datum, fill) -> physical values of cols: datum a decoded row (fill: columns it lacks, added
    later, get their defaults) or key; JSON forms read back first. Encoding ``avro-connect`` (the
    debezium envelope's Avro with Connect schemas, read as JSON is): the raw Connect datum is read
    to pgshovel2's JSON forms first (consumer.connectjson.avro_row_reader)."""
    if encoding == "avro":
        return lambda datum, fill: spark_codec.physical_row(cols, datum, fill)
    by_name = {c.name: c for c in table.columns}
    columns = [by_name[c.name] for c in cols]
    read = jsonback.datum_reader_of(columns)
    if encoding == "avro-connect":
        connect = connectjson.avro_row_reader(row_struct("Value", tuple(columns), True),
                                              {names.avro_name(c.name): c.name for c in columns})
        return lambda datum, fill: spark_codec.physical_row(cols, read(connect(datum), fill))
    return lambda datum, fill: spark_codec.physical_row(cols, read(datum, fill))


def _row_datum(value: Any, envelope: str, where: str) -> Any:
    """The row a decoded value carries (None for a tombstone): the value itself (row envelope),
    or a Debezium event's ``after``, else its ``before`` (a ``d`` event)."""
    if value is None or envelope != "debezium":
        return value
    if not isinstance(value, dict) or "after" not in value or "before" not in value:
        raise ConsumerError(f"{where}: not a Debezium event (no before/after fields)")
    return value["after"] if value["after"] is not None else value["before"]


def unchanged_columns(headers: dict[str, str], op: str, where: str) -> list[str]:
    """The ``pgshovel.unchanged`` column names of a message (empty without the header): on an
    UPDATE (op u), or on the create of an UPDATE of the key (op c; pgshovel2.sparkjobs.carry
    takes the values from the old key). Raises ConsumerError for a malformed header or another op."""
    raw = headers.get(wire.UNCHANGED)
    if raw is None:
        return []
    try:
        cols = json.loads(raw)
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
            raise ValueError("not a JSON array of column names")
    except ValueError as exc:
        raise ConsumerError(f"{where}: malformed {wire.UNCHANGED} header {raw!r}: {exc}") from exc
    if op not in ("u", "c"):
        raise ConsumerError(f"{where}: header {wire.UNCHANGED} on a message of op {op!r} (only u and c carry it)")
    return cols


# Transactions-topic records that remove a table's rows up to their position: TRUNCATE, and the end of
# a dropped table (TABLE_DROPPED: its materialized rows go as the source's did); TOPIC_CHANGED is named
# so that the job can refuse it (pgshovel2.sparkjobs.materialize).
REMOVING, TOPIC_CHANGED = ("TRUNCATE", "TABLE_DROPPED"), "TOPIC_CHANGED"


def truncations(registry_url: Registry | None, handoff: str):
    """mapPartitions function: transactions-topic rows -> (table topic, position, type) of each
    TRUNCATE, TABLE_DROPPED and TOPIC_CHANGED record the handoff (text form) does not cover."""
    def convert(rows: Iterator[Any]) -> Iterator[tuple[str, str, str]]:
        decoder, point = Decoder(registry_url, raw=True), parse_handoff(handoff)
        for row in rows:
            rec = decoder.decode(row["value"], f"transactions record at offset {row['offset']}")
            kind = rec.get("type") if rec else None
            if (kind in REMOVING or kind == TOPIC_CHANGED) and not point.covers(rec["txid"], rec["position"]):
                yield rec["table"], rec["position"], kind
    return convert


def change_frame(spark, batch, topic: str, table: Table, cols: list[spark_codec.SparkColumn],
                 registry_url: Registry | None, handoff: str, copied: frozenset[str] | None = None,
                 encoding: str = "avro", envelope: str = "row"):
    """The DataFrame of a micro-batch's changes of table (batch: Kafka rows of every topic; topic:
    the table's): the logical columns cols, then OP, POSITION, OFFSET and UNCHANGED
    (:func:`change_rows`; what the bootstrap holds left out: changes its handoff covers,
    snapshot rows of the copied tables). Runs on the driver; the decoding runs in Spark's
    Python workers."""
    from pyspark.sql import types as st

    meta = [st.StructField(OP, st.StringType()), st.StructField(POSITION, st.StringType()),
            st.StructField(OFFSET, st.LongType()), st.StructField(UNCHANGED, st.ArrayType(st.StringType()))]
    data = batch.filter(batch.topic == topic).select("key", "value", "partition", "offset", "headers")
    physical = spark.createDataFrame(data.rdd.mapPartitions(
        change_rows(table, cols, registry_url, handoff, copied, encoding, envelope)),
                                     st.StructType(spark_codec.physical_fields(cols) + meta), verifySchema=False)
    return physical.selectExpr(*spark_codec.logical_exprs(cols), OP, POSITION, OFFSET, UNCHANGED)


def empty_frame(spark, cols: list[spark_codec.SparkColumn]):
    """An empty DataFrame of the logical columns cols and POSITION: the bootstrap state of a table
    the bootstrap did not copy (added to the set later)."""
    from pyspark.sql import types as st

    fields = spark_codec.physical_fields(cols) + [st.StructField(POSITION, st.StringType())]
    empty = spark.createDataFrame([], st.StructType(fields))
    return empty.selectExpr(*spark_codec.logical_exprs(cols), POSITION)
