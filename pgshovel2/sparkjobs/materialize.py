"""The materialize job: a bootstrap's Parquet + the set's change stream -> current state (Parquet).

Changes are read from Kafka (spark-sql-kafka-0-10, ``read_committed``) from
the bootstrap manifest's offsets, decoded by the project's consumer decoder
(pgshovel2.sparkjobs.changes), filtered by the manifest's handoff (txid snapshot or LSN) and
applied per key in ``pgshovel.position`` order (a tombstone deletes; a
TRUNCATE on the transactions topic deletes every row older than it); an unkeyed
table's as a multiset (pgshovel2.sparkjobs.multiset). ``--format iceberg``
(pgshovel2.sparkjobs.icemerge) refuses unkeyed tables: its MERGE needs a key.

Output layout (both modes): ``OUTPUT/CURRENT`` names the current state
folder ``state-<n>``, which holds ``tables/<schema>.<table>/`` (Parquet: the
captured columns plus ``__pgshovel_position``, the position of the change
that produced the row, empty for bootstrap rows). Batch mode writes state-0
once; stream mode (Structured Streaming, foreachBatch) writes state-<batch
id> per micro-batch, switches CURRENT, then deletes older states, and skips a
batch it already merged (replays after a restart are harmless).
"""

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pgshovel2 import kafkaconf
from pgshovel2.bootstrap.manifest import BootstrapError, Manifest
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec import spark as spark_codec
from pgshovel2.config import SetConfig
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.topics import SetTopics
from pgshovel2.kafkaconf import Kafka
from pgshovel2.kafkajava import java_properties
from pgshovel2.registryconf import Registry
from pgshovel2.setrecord import SetRecord
from pgshovel2.sparkjobs import carry, changes, evolve, iceberg, multiset
from pgshovel2.sparkjobs.bootstrap import table_dir
from pgshovel2.sparkjobs.session import require_class
from pgshovel2.sparkjobs.tablewatch import TableWatch
from pgshovel2.zkauth import ZooKeeperAuth

log = logging.getLogger(__name__)
CURRENT = "CURRENT"


@dataclass(frozen=True)
class MaterializeOptions:
    """bootstrap: the bootstrap directory (with manifest.json); output: the state directory;
    stream: Structured Streaming with checkpoint (a directory); available_now: in stream
    mode, process what is in Kafka now and stop; trigger_seconds: micro-batch interval.
    bootstrap_servers: the Kafka settings (pgshovel2.kafkaconf: their consumer properties, in
    Java form for Spark's Kafka source, pgshovel2.kafkajava), or the bootstrap servers with this
    process's; registry_url: the schema registry's settings or URL (pgshovel2.registryconf).
    zookeeper_hosts, cluster: where the set's records are: its current record's tables that the
    bootstrap did not copy (added later by ``set upgrade``) are materialized too, from their
    online snapshot's rows, and a JSON set's columns of every set version are read there; None:
    the manifest's record only (the bootstrap's tables, its set version). zookeeper_auth: how to
    authenticate there (pgshovel2.zkauth; None: no authentication)."""

    bootstrap: str
    output: str
    bootstrap_servers: Kafka
    registry_url: Registry | None = None
    stream: bool = False
    checkpoint: str | None = None
    available_now: bool = False
    trigger_seconds: float = 10.0
    zookeeper_hosts: str | None = None
    cluster: str = "default"
    zookeeper_auth: ZooKeeperAuth | None = None


# Least seconds between reads of the set's record for added tables (tablewatch).
WATCH_SECONDS = 5.0


def current_state(output: str | Path) -> Path | None:
    """The current state folder of a materialize output (None before the first merge)."""
    pointer = Path(output) / CURRENT
    if not pointer.exists():
        return None
    return Path(output) / json.loads(pointer.read_text())["state"]


def run(spark, options: MaterializeOptions) -> None:
    """Materialize once (batch) or until stopped (stream); any encoding (avro, json) and envelope
    (row, debezium). Raises BootstrapError for an unusable bootstrap or a missing Kafka
    connector; ConsumerError (in the Spark job's error) names a message it cannot read."""
    manifest = Manifest.load(options.bootstrap)
    if manifest.output != "parquet":
        raise BootstrapError(f"bootstrap {options.bootstrap} went to Kafka: materialize needs a Parquet bootstrap")
    require_class(spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider",
                  "pass the spark-sql-kafka-0-10 package (scripts/install.sh fetches it into .cache/spark-jars)")
    job = _Job(spark, manifest, options)
    if options.stream:
        job.stream()
    else:
        job.batch()


class _Job:
    def __init__(self, spark, manifest: Manifest, options: MaterializeOptions):
        self.spark, self.manifest, self.options = spark, manifest, options
        self.record = record = self._record(manifest.set, manifest.set_record)
        self.topics = SetTopics.from_record(record)
        # a copied table keeps the columns of its copy; an added one has the current record's
        self.tables = {(t.schema, t.name): t for t in record.wire_tables}
        self.tables.update({(t.schema, t.name): t for t in manifest.set_record.wire_tables})
        self.copied = frozenset(f"{c.schema}.{c.name}" for c in manifest.tables)
        self.partitions = record.config.topics.partitions
        self.wire = wire_of(record.config)
        self.output = Path(options.output).absolute()
        self._versions = {manifest.set_version: manifest.set_record, record.version: record}

    def _store(self) -> ClusterStore:
        return ClusterStore(self.options.zookeeper_hosts or "", self.options.cluster, auth=self.options.zookeeper_auth)

    def _record(self, set_name: str, boot: SetRecord) -> SetRecord:
        """The set's current record (ZooKeeper), else the bootstrap's."""
        if self.options.zookeeper_hosts is None:
            return boot
        with self._store() as store:
            return store.get_set(set_name)[0]

    def version_table(self, table: Table, version: int) -> Table:
        """table as set version version defines it (its columns then). Raises BootstrapError when
        that version is not at hand (no ZooKeeper) or lacks the table."""
        records = self._versions
        record = records.get(version)
        if record is None and self.options.zookeeper_hosts is not None:
            with self._store() as store:
                record = records[version] = store.get_version(self.manifest.set, version)
        found = None if record is None else next(
            (t for t in record.wire_tables if (t.schema, t.name) == (table.schema, table.name)), None)
        if found is None:
            raise BootstrapError(f"{table.qualified}: set version {version} of set {self.manifest.set!r} is "
                                 f"{'not known here: pass --zookeeper-hosts' if record is None else 'without it'}")
        return found

    def _kafka_options(self) -> dict[str, str]:
        topics = [t.topic for t in self.topics.tables] + [self.topics.transactions]
        # a topic the manifest lacks (a table added to the set later) is read from its start (-2: earliest)
        offsets = {t: self.manifest.kafka_offsets.get(t) or {str(p): -2 for p in range(self.partitions)}
                   for t in topics}
        kafka = kafkaconf.settings(self.options.bootstrap_servers)
        secured = {f"kafka.{name}": value for name, value in java_properties(kafka).items()}
        return {**secured, "kafka.bootstrap.servers": kafka.bootstrap,
                "groupIdPrefix": f"{kafka.group_prefix()}-spark",
                "kafka.isolation.level": "read_committed", "includeHeaders": "true",
                "assign": json.dumps({t: sorted(int(p) for p in offsets[t]) for t in topics}),
                "startingOffsets": json.dumps(offsets),
                "failOnDataLoss": "false"}

    def beyond(self, topic: str, read_as: Table, cols: list, batch_id: int):
        """() -> the decoded changes (changes.change_frame of read_as, cols) of topic after micro-batch
        batch_id's end offsets (Spark's offset log), up to the last committed now: for
        pgshovel2.sparkjobs.carry. None outside stream mode (a batch run reads again when rerun)."""
        if not (self.options.stream and self.options.checkpoint):
            return None

        def read():
            ends = json.loads(iceberg.batch_end_offsets(self.spark, os.path.abspath(self.options.checkpoint),
                                                        batch_id))[topic]
            reader = self.spark.read.format("kafka")
            options = {**self._kafka_options(), "assign": json.dumps({topic: sorted(int(p) for p in ends)}),
                       "startingOffsets": json.dumps({topic: ends}), "endingOffsets": "latest"}
            for key, value in options.items():
                reader = reader.option(key, value)
            return changes.change_frame(self.spark, reader.load(), topic, read_as, cols, self.options.registry_url,
                                        str(self.manifest.handoff_point), self.copied, *self.wire)
        return read

    def batch(self) -> None:
        """Read everything committed now, merge it on the bootstrap, write state-0."""
        if current_state(self.output) is not None:
            raise BootstrapError(f"materialize output {self.output} already holds a state: choose a new path")
        reader = self.spark.read.format("kafka")
        for key, value in self._kafka_options().items():
            reader = reader.option(key, value)
        self.merge(reader.option("endingOffsets", "latest").load(), 0)

    def stream(self) -> None:
        """Merge micro-batches until stopped (or, available_now, until caught up). With ZooKeeper, a
        table added to the set meanwhile restarts the query to read its topic too (tablewatch)."""
        if not self.options.checkpoint:
            raise BootstrapError("--stream needs --checkpoint DIR")
        while self._run_query():
            self.refresh()

    def _run_query(self) -> bool:
        """Run the streaming query until it ends; True when it was stopped for an added table."""
        reader = self.spark.readStream.format("kafka")
        for key, value in self._kafka_options().items():
            reader = reader.option(key, value)
        writer = (reader.load().writeStream.foreachBatch(self.merge)
                  .option("checkpointLocation", self.options.checkpoint))
        writer = (writer.trigger(availableNow=True) if self.options.available_now
                  else writer.trigger(processingTime=f"{self.options.trigger_seconds} seconds"))
        query = writer.start()
        if self.options.zookeeper_hosts is None or self.options.available_now:
            query.awaitTermination()
            return False
        watch = TableWatch(self.options.zookeeper_hosts, self.options.cluster, self.manifest.set,
                           {(t.schema, t.name) for t in self.topics.tables},
                           max(self.options.trigger_seconds, WATCH_SECONDS), query.stop, self.options.zookeeper_auth)
        watch.start()
        try:
            query.awaitTermination()
        finally:
            grown = watch.finish()
        return grown

    def refresh(self) -> None:
        """Take the set's current record (ZooKeeper): its tables not read yet join the job."""
        self.record = record = self._record(self.manifest.set, self.manifest.set_record)
        self.topics = SetTopics.from_record(record)
        for t in record.wire_tables:  # a table read before keeps its definition
            self.tables.setdefault((t.schema, t.name), t)
        self._versions[record.version] = record

    def merge(self, batch, batch_id: int) -> None:
        """Apply one batch of Kafka rows to the current state (or the bootstrap) as state-<batch_id>."""
        current = current_state(self.output)
        if current is not None and int(current.name.split("-")[1]) >= batch_id and self.options.stream:
            log.info("micro-batch %d was merged before a restart: skipping it", batch_id)
            return
        batch = batch.persist()
        try:
            truncated = self._truncations(batch)
            target = self.output / f"state-{batch_id:010d}"
            shutil.rmtree(target, ignore_errors=True)
            shape = BatchShapes(self, batch)
            for t in self.topics.tables:
                table = self.tables.get((t.schema, t.name))
                if table is None:  # a table added after the bootstrap and dropped before this job read the set
                    continue
                read_as, cols = shape.of(table, t.topic)
                decoded = changes.change_frame(self.spark, batch, t.topic, read_as, cols, self.options.registry_url,
                                               str(self.manifest.handoff_point), self.copied, *self.wire).persist()
                try:
                    base, stream, names = _conform(self._base(table, current), decoded, cols)
                    beyond = self.beyond(t.topic, read_as, cols, batch_id)
                    rows = self._apply(table, names, base, stream, truncated.get(t.topic), beyond)
                    rows.write.parquet(str(target / "tables" / table_dir(t.schema, t.name)))
                finally:
                    decoded.unpersist()
        finally:
            batch.unpersist()
        self._switch(target)
        log.info("merged micro-batch %d into %s", batch_id, target)

    def _truncations(self, batch) -> dict[str, str]:
        """Table topic -> position of its last TRUNCATE (or TABLE_DROPPED: a dropped table's rows go
        too) in the batch (not visible in the snapshot). Raises BootstrapError at a TOPIC_CHANGED
        (``pgshovel set accept-ddl --new-topic``): the table's rows are in two topics from there on,
        which this job does not merge; bootstrap and materialize the set anew."""
        snapshot = str(self.manifest.handoff_point)
        txns = batch.filter(batch.topic == self.topics.transactions).select("value", "offset")
        out: dict[str, str] = {}
        for topic, position, kind in txns.rdd.mapPartitions(changes.truncations(self.options.registry_url,
                                                                                snapshot)).collect():
            if kind == changes.TOPIC_CHANGED:
                raise BootstrapError(f"the table of topic {topic} goes on in a new topic generation from position "
                                     f"{position} (pgshovel set accept-ddl --new-topic); materialize does not merge "
                                     "two topics of one table: run pgshovel bootstrap again and materialize from it")
            out[topic] = max(out.get(topic, ""), position)
        return out

    def _base(self, table: Table, current: Path | None):
        """The state to merge on: the current state, else the bootstrap copy (position ''), else
        (a table added to the set after the bootstrap, not in the state yet) no rows."""
        from pyspark.sql import functions as sf

        held = None if current is None else current / "tables" / table_dir(table.schema, table.name)
        if held is not None and held.exists():
            return self.spark.read.parquet(str(held))
        copy = next((c for c in self.manifest.tables if (c.schema, c.name) == (table.schema, table.name)), None)
        if copy is None:  # added to the set after the bootstrap
            return changes.empty_frame(self.spark, spark_codec.columns(table))
        base = self.spark.read.parquet(self.manifest.table_path(self.options.bootstrap, copy))
        return base.withColumn(changes.POSITION, sf.lit(""))

    def _apply(self, table: Table, names: list[str], base, stream, truncated_at: str | None, beyond=None):
        """Latest row per key by (position, offset) of the state base and stream (the table's
        decoded changes: changes.change_frame), both of columns names (:func:`_conform`),
        unlogged values carried (pgshovel2.sparkjobs.carry); tombstones and rows before a TRUNCATE
        removed. beyond: :meth:`beyond`. An unkeyed table: its multiset (pgshovel2.sparkjobs.multiset)."""
        from pyspark.sql import functions as sf

        if not table.key:
            return multiset.apply(base, stream, names, truncated_at)
        base = (base.withColumn(changes.OP, sf.lit("r")).withColumn(changes.OFFSET, sf.lit(-1).cast("long"))
                .withColumn(changes.UNCHANGED, sf.array().cast("array<string>")))
        both = carry.fill(stream, list(table.key), names, base=base, beyond=beyond)
        latest = latest_per_key(both, table.key).filter(sf.col(changes.OP) != "d")
        if truncated_at is not None:
            latest = latest.filter(sf.col(changes.POSITION) > truncated_at)
        return latest.select(*[sf.col(spark_codec.quote(n)) for n in names], changes.POSITION)

    def _switch(self, target: Path) -> None:
        """Point CURRENT at target (atomic rename), then delete the other states."""
        pointer = self.output / CURRENT
        tmp = self.output / f".{CURRENT}.tmp"
        tmp.write_text(json.dumps({"state": target.name}))
        os.replace(tmp, pointer)
        for old in self.output.glob("state-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)


def latest_per_key(rows, key: tuple[str, ...] | list[str]):
    """rows (change rows with POSITION and OFFSET) reduced to each key's last one by (position, offset)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    keys = [sf.col(spark_codec.quote(k)) for k in key]
    order = Window.partitionBy(*keys).orderBy(sf.col(changes.POSITION).desc(), sf.col(changes.OFFSET).desc())
    return rows.withColumn("__rank", sf.row_number().over(order)).filter("__rank = 1").drop("__rank")


def _conform(base, stream, cols: list[spark_codec.SparkColumn]):
    """(base, stream, names): the state base (its columns + POSITION) and the batch's changes of a
    table (cols: BatchShapes.of) made to hold the same columns, names: the state's columns in
    order (renamed as the batch's set version renamed them), then the columns the batch adds. A
    column the batch does not carry (dropped by DDL; or every non-key column of a batch with only
    deletes) is null in its rows; an added column holds its default (SparkColumn.default) in the
    state's rows, which existed before it was added."""
    from pyspark.sql import functions as sf

    renames, added = evolve.plan([n for n in base.columns if n != changes.POSITION], cols)
    base = base.withColumnsRenamed(renames) if renames else base
    for col in added:
        base = base.withColumn(col.name, sf.lit(col.default).cast(stream.schema[col.name].dataType))
    names = [n for n in base.columns if n != changes.POSITION]
    for name in names:
        if name not in stream.columns:
            stream = stream.withColumn(name, sf.lit(None).cast(base.schema[name].dataType))
    return base, stream, names


def wire_of(config: SetConfig) -> tuple[str, str]:
    """(encoding, envelope) as the jobs read a set's messages: encoding ``avro-connect`` for the
    debezium envelope's Avro with Connect schemas (read as JSON is: the columns of the set version,
    values back to pgshovel2's forms: changes._physical)."""
    encoding = "avro-connect" if config.encoding == "avro" and config.connect else config.encoding
    return encoding, config.envelope


class BatchShapes:
    """The columns each table's changes in one micro-batch carry. Avro: from the value schemas of
    the batch (pgshovel2.sparkjobs.evolve; a Debezium envelope's row record). JSON: the table as
    the batch's newest set version (header ``pgshovel.version``) defines it (_Job.version_table),
    plus the columns of its older versions that the newest dropped (evolve.versions_table)."""

    def __init__(self, job: "_Job", batch):
        self.job, (self.encoding, self.envelope) = job, job.wire
        if self.encoding != "avro":
            self.versions = evolve.batch_versions(batch)
        else:
            self.schemas, self.decoder = evolve.batch_schemas(batch), Decoder(job.options.registry_url)

    def of(self, table: Table, topic: str) -> tuple[Table, list]:
        """(table as its changes are read, their columns: spark_codec.SparkColumn, whose default
        is what rows written before the column was added hold)."""
        if self.encoding == "avro":
            return table, evolve.batch_columns(table, self.schemas.get(topic, []), self.decoder, self.envelope)
        if topic not in self.versions:  # deletes only: the key columns
            return table, [c for c in spark_codec.columns(table) if c.name in table.key]
        version = evolve.versions_table([self.job.version_table(table, v) for v in self.versions[topic]])
        return version, spark_codec.columns(version)
