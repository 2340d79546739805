"""The bootstrap job: a consistent, parallel copy of a set's tables at an exact handoff position.

Steps (see docs in README.rst, "Bootstrapping consumers with Spark"):

1. read the set record from ZooKeeper; refuse backends without a handoff rule;
2. read the committed end offsets of the set's topics (data, then transactions);
3. export a snapshot (pgshovel2.backends.export) and record its handoff;
4. read every table in key-range JDBC partitions that all adopt that snapshot,
   rows in the capture trigger's form (pgshovel2.encode_row), converted by the
   relay's own codec;
5. write one Parquet dataset per table (pgshovel2.codec.spark types), or the
   relay's op ``r`` messages to the set's topics in one Kafka transaction;
6. write manifest.json last, in a temporary directory renamed into place.
"""

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from psycopg2.extensions import parse_dsn

from pgshovel2 import backends, controlsconf, kafkaconf, names, redact
from pgshovel2.backends.snapshot import ExportedSnapshot
from pgshovel2.bootstrap.manifest import BootstrapError, Manifest, TableCopy
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import spark as spark_codec
from pgshovel2.codec.controls import ColumnControls, controlled
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.consumer.topics import SetTopics
from pgshovel2.db import libpq_dsn
from pgshovel2.errors import PgshovelError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.registryconf import Registry
from pgshovel2.setrecord import SetRecord
from pgshovel2.sparkjobs import icebootstrap, readplan
from pgshovel2.sparkjobs.iceberg import Catalog
from pgshovel2.sparkjobs.jdbc import jdbc_source
from pgshovel2.sparkjobs.readplan import ROW_ALIAS, ReadPlan
from pgshovel2.sparkjobs.session import require_class
from pgshovel2.wire import snapshot_header

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BootstrapOptions:
    """Bootstrap settings.

    output: directory to create (must not exist); it holds manifest.json and,
    for Parquet, tables/<schema>.<table>/. bootstrap_servers: Kafka (always
    needed: the handoff offsets): pgshovel2.kafkaconf.KafkaSettings, or the bootstrap servers
    with this process's PGSHOVEL_KAFKA_* variables. registry_url: schema registry (Avro sets
    with to_kafka): pgshovel2.registryconf.RegistrySettings or its URL. to_kafka: write op
    ``r`` messages instead of Parquet.
    partition_rows: target rows per JDBC partition (from pg_class.reltuples);
    max_partitions: per table; fetch_size: JDBC rows per round trip.
    native: read tables of plain types (readplan.is_native) as JDBC columns
    straight into Parquet, without Python per row (Parquet output only).
    iceberg: write the tables into this Iceberg catalog (pgshovel2.sparkjobs.iceberg:
    pgshovel.<set>.<schema>.<table>, handoff and offsets in their properties) instead of
    Parquet; the manifest is still written to output.
    """

    output: str
    bootstrap_servers: Kafka
    registry_url: Registry | None = None
    to_kafka: bool = False
    partition_rows: int = 250_000
    max_partitions: int = 64
    fetch_size: int = 10_000
    native: bool = True
    iceberg: Catalog | None = None


def run(spark, store: ClusterStore, set_name: str, options: BootstrapOptions) -> Manifest:
    """Bootstrap set_name; returns the manifest written into options.output.

    Raises BootstrapError (set not relayed yet, output exists, table missing,
    snapshot expired, JDBC driver missing, Spark failure), ClusterError,
    ConsumerError (Kafka). Nothing is left at options.output on failure.
    """
    record, _ = store.get_set(set_name)
    if store.get_relay_record(set_name, "snapshot") is None:
        raise BootstrapError(f"the relay of set {set_name!r} has not started yet: start pgshovel-kafka-relay "
                             "first (the stream a bootstrap hands off to must exist)")
    output = Path(options.output).absolute()
    if output.exists():
        raise BootstrapError(f"bootstrap output {output} already exists: choose a new path")
    require_class(spark, "org.postgresql.Driver", "install libpostgresql-jdbc-java (scripts/install.sh) "
                  "or pass the driver with --jdbc-jar / spark-submit --jars")
    topics = SetTopics.from_record(record)
    offsets = _kafka_offsets(topics, options.bootstrap_servers)
    tmp = output.parent / f".{output.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    kafka_offsets = {t: {str(p): o for (tt, p), o in sorted(offsets.items()) if tt == t}
                     for t in sorted({t for t, _ in offsets})}
    tables = icebootstrap.Tables(spark, set_name, kafka_offsets) if options.iceberg else None
    if tables:
        tables.check_absent(record.tables)
    try:
        copies, handoff = _copy(spark, record, topics, tmp, options, tables)
        manifest = Manifest(
            set=set_name, cluster=store.cluster, set_version=record.version,
            record=record.replace(config=replace(record.config, dsn=redact.strip_dsn(record.dsn))).to_dict(),
            output=_output_kind(options), tables=copies,
            handoff=handoff,
            kafka_offsets=kafka_offsets,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        manifest.write(tmp)
        os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if tables:
            tables.drop_created()
        raise
    log.info("bootstrap of set %r complete: %s (%d rows)", set_name, output, sum(c.rows for c in copies))
    return manifest


def _kafka_offsets(topics: SetTopics, bootstrap: Kafka) -> dict[tuple[str, int], int]:
    """Committed end offsets of the set's data topics, then of its transactions topic."""
    admin = kafkaconf.admin(bootstrap)
    what = f"of set {topics.set_name!r}"
    counts = partition_counts(admin, [t.topic for t in topics.tables] + [topics.transactions], bootstrap, what)
    data = [(t.topic, p) for t in topics.tables for p in range(counts[t.topic])]
    return end_offsets(admin, [data, [(topics.transactions, 0)]], bootstrap)


def _output_kind(options: BootstrapOptions) -> str:
    return "kafka" if options.to_kafka else "iceberg" if options.iceberg else "parquet"


def _copy(spark, record: SetRecord, topics: SetTopics, tmp: Path, options: BootstrapOptions,
          tables: "icebootstrap.Tables | None") -> tuple[list[TableCopy], dict]:
    """Export the snapshot and copy every table under it; returns (copies, handoff record)."""
    by_table = {(t.schema, t.name): t.topic for t in topics.tables}
    with backends.export(record, BootstrapError) as snap:
        # what the snapshot's own connection reached, as it did (TLS, password from wherever libpq took it)
        sslpassword = parse_dsn(libpq_dsn(record.relay_dsn, f"set {record.name!r}", BootstrapError))
        url, props = jdbc_source(snap.conn, sslpassword.get("sslpassword") or "")
        native = options.native and not options.to_kafka
        plans = [_plan(record, snap, t, options, native) for t in record.tables]
        writer = _KafkaWriter(record, snap, options) if options.to_kafka else None
        copies = []
        try:
            for plan in plans:
                started = time.monotonic()
                raw = _read(spark, plan, url, props, snap.snapshot_id, options.fetch_size)
                topic = by_table[(plan.table.schema, plan.table.name)]
                try:
                    if writer:
                        copy = writer.write(plan, raw, topic)
                    elif tables:
                        copy = tables.write(plan.table, logical_frame(plan, raw), topic, plan.partitions,
                                            str(snap.handoff))
                    else:
                        copy = _write_parquet(spark, plan, raw, tmp, topic)
                except PgshovelError:
                    raise
                except Exception as exc:  # Spark/JDBC failures arrive as Py4JJavaError or PySpark errors
                    raise _read_error(exc, plan.table, snap) from exc
                log.info("table %s: %d rows in %.1fs (%.0f rows/s), %d partition(s)", plan.table.qualified,
                         copy.rows, time.monotonic() - started,
                         copy.rows / max(time.monotonic() - started, 1e-6), plan.partitions)
                copies.append(copy)
            if not snap.alive():  # it must outlive every partition's SET TRANSACTION SNAPSHOT
                raise snap.ended()
            if writer:
                copies = writer.commit()
        finally:
            if writer:
                writer.close()
        return copies, snap.handoff_record


def _read_error(exc: Exception, table: Table, snap: ExportedSnapshot) -> BootstrapError:
    text = str(exc)
    if "invalid snapshot identifier" in text or not snap.alive():
        return snap.ended(BootstrapError(f"reading {table.qualified} failed"))
    first = next((line for line in text.splitlines() if "Exception" in line or "ERROR" in line), text[:300])
    return BootstrapError(f"reading {table.qualified} failed: {first.strip()}")


def _plan(record: SetRecord, snap: ExportedSnapshot, table: Table, options: "BootstrapOptions",
          native: bool) -> ReadPlan:
    """table's read plan, with its column controls (read as encoded rows then: plain columns would
    carry the values as they are). Raises BootstrapError, SecretReferenceError (a hash's salt)."""
    configured = record.controls_of(table)
    controls = controlled(table, configured, controlsconf.salts(configured, table.qualified))
    plan = readplan.plan(snap, table, options.partition_rows, options.max_partitions, native and controls is None)
    return plan if controls is None else replace(plan, table=controls.table, controls=controls)


def _read(spark, plan: ReadPlan, url: str, props: dict[str, str], snapshot_id: str, fetch_size: int):
    """A DataFrame (__pgshovel_pk, __pgshovel_row) of one table, every partition in the exported snapshot."""
    reader = (spark.read.format("jdbc").option("url", url).option("driver", "org.postgresql.Driver")
              .option("dbtable", plan.query).option("fetchsize", str(fetch_size))
              .option("sessionInitStatement", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                      f"SET TRANSACTION SNAPSHOT '{snapshot_id}'"))
    for key, value in props.items():
        reader = reader.option(key, value)
    if plan.column is not None:
        reader = (reader.option("partitionColumn", plan.column).option("lowerBound", str(plan.lower))
                  .option("upperBound", str(plan.upper + 1)).option("numPartitions", str(plan.partitions)))
    return reader.load()


def physical_converter(table: Table, arrow_schema, controls: ColumnControls | None = None):
    """mapInArrow function: batches of __pgshovel_row (trigger-form JSON, the relay's own row form)
    -> Arrow batches of physical columns, converted by the relay's codec (RowEncoder, Avro) with
    the table's column controls (table: the controlled one)."""
    cols = spark_codec.columns(table)

    def convert(batches):
        import pyarrow as pa

        encoder = RowEncoder(table, avro=True, controls=controls)
        for batch in batches:
            rows = [spark_codec.physical_row(cols, encoder.convert(json.loads(text)))
                    for text in batch.column(0).to_pylist()]
            columns = list(zip(*rows, strict=True)) if rows else [() for _ in cols]
            yield pa.RecordBatch.from_arrays([pa.array(list(c), type=f.type) for c, f in
                                              zip(columns, arrow_schema, strict=True)], schema=arrow_schema)
    return convert


def table_dir(schema: str, name: str) -> str:
    """Folder name of a table's dataset: escaped like topic parts, ``schema.table``."""
    return f"{names.topic_part(schema)}.{names.topic_part(name)}"


def logical_frame(plan: ReadPlan, raw):
    """The table's rows as the codec's logical Spark columns (pgshovel2.codec.spark)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    cols = spark_codec.columns(plan.table)
    physical = StructType(spark_codec.physical_fields(cols))
    if plan.native:  # JDBC already gives the codec's values; only the Spark types are aligned
        df = raw.select(*[raw[spark_codec.quote(c.name)].cast(c.physical).alias(c.name) for c in cols])
    else:
        df = raw.select(ROW_ALIAS).mapInArrow(physical_converter(plan.table, to_arrow_schema(physical),
                                                                 plan.controls), physical)
    return df.selectExpr(*spark_codec.logical_exprs(cols))


def _write_parquet(spark, plan: ReadPlan, raw, tmp: Path, topic: str) -> TableCopy:
    table = plan.table
    rel = f"tables/{table_dir(table.schema, table.name)}"
    path = str(tmp / rel)
    logical_frame(plan, raw).write.parquet(path)
    n, checksum = spark.read.parquet(path).selectExpr(
        "count(*)", "CAST(coalesce(sum(CAST(xxhash64(*) AS DECIMAL(38,0))), 0) AS STRING)").first()
    return TableCopy(table.schema, table.name, topic, rel, int(n), checksum, plan.partitions)


class _Tally:
    """A sink wrapper counting messages and summing value hashes per topic (the Kafka checksum)."""

    def __init__(self, sink):
        self.sink = sink
        self.rows: Counter[str] = Counter()
        self.sums: Counter[str] = Counter()

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: list) -> None:
        self.sink.produce(topic, key, value, headers)
        self.rows[topic] += 1
        digest = hashlib.sha256(value or b"").digest()[:8]
        self.sums[topic] = (self.sums[topic] + int.from_bytes(digest, "big")) % 2**64


class _KafkaWriter:
    """Writes op r messages exactly as the relay does (its routes and emitter, Debezium snapshot markers
    over the whole bootstrap), in one Kafka transaction. lsn: the LSN the snapshot is at (logical
    backend), for the debezium envelope's source.lsn; None for the trigger backend."""

    def __init__(self, record: SetRecord, snap: ExportedSnapshot, options: BootstrapOptions):
        from pgshovel2.relay import Emitter, SnapshotMarks, table_routes
        from pgshovel2.sinks.kafka import KafkaSink
        from pgshovel2.sinks.registry import SchemaRegistry

        registry = SchemaRegistry(options.registry_url, max_wait=60) if options.registry_url else None
        routes, txn_writer = table_routes(record, registry)
        self.sink = KafkaSink(options.bootstrap_servers,
                              f"pgshovel2.bootstrap.{record.name}.{uuid.uuid4().hex[:8]}")
        self.sink.start()
        self.tally = _Tally(self.sink)
        self.emitter = Emitter(record.name, routes, record.topics.transactions, txn_writer, self.tally)
        # op r rows sort at the handoff: the consistent point's LSN (logical: also the debezium
        # envelope's source.lsn), tick 0 (trigger: the bootstrap has no tick; its txid snapshot
        # decides the handoff)
        lsn = getattr(snap.handoff, "lsn", None)
        self.position = lambda ordinal: snapshot_header(record.backend, lsn or 0, ordinal)
        self.ordinal, self.ts_ms = 0, int(time.time() * 1000)
        self._marks = SnapshotMarks(lambda item, marker: self.emitter.snapshot_row(*item, self.ts_ms, marker, lsn))
        self._copies: list[TableCopy] = []

    def write(self, plan: ReadPlan, raw, topic: str) -> TableCopy:
        """Produce the op r messages of one table (rows collected to the driver in partition order).

        The table's last row is produced by the next write or by :meth:`commit` (its snapshot
        marker depends on what follows), so the copy returned has no checksum yet: commit's has.
        """
        t, rows = plan.table, 0
        for row in raw.select(ROW_ALIAS).toLocalIterator():
            self._marks.add(t.qualified, (t, json.loads(row[0]), self.position(self.ordinal)))
            self.ordinal += 1
            rows += 1
        copy = TableCopy(t.schema, t.name, topic, None, rows, "", plan.partitions)
        self._copies.append(copy)
        return copy

    def commit(self) -> list[TableCopy]:
        """Produce the last row and commit the Kafka transaction: every op r message becomes
        visible at once. Returns the tables written, with their checksums."""
        self._marks.finish()
        self.sink.commit()
        return [replace(c, checksum=str(self.tally.sums[c.topic])) for c in self._copies]

    def close(self) -> None:
        """Abort whatever is not committed."""
        self.sink.close()


__all__ = ["BootstrapError", "BootstrapOptions", "ConsumerError", "logical_frame", "physical_converter", "run",
           "table_dir"]
