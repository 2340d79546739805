"""The materialize job into Apache Iceberg: one MERGE INTO per table and micro-batch.

Start: each captured table's Iceberg table (pgshovel2.sparkjobs.iceberg) is
created from the bootstrap's Parquet copy when it does not exist yet, in one
atomic CREATE TABLE AS SELECT that records the handoff and start offsets in
its properties. Then Structured Streaming reads the set's topics from the
manifest's offsets; foreachBatch decodes each batch (pgshovel2.sparkjobs.changes,
changes the handoff covers skipped), keeps the batch's last change per key in
``pgshovel.position`` order (values an UPDATE left unchanged and unlogged
taken from the key's previous change in the batch, else from the table; at an
UPDATE of the key, the old key's: pgshovel2.sparkjobs.carry), and
MERGEs it: deletes, updates, inserts; a TRUNCATE in the batch also deletes
every row the batch does not write after it (WHEN NOT MATCHED BY SOURCE).
A batch carrying a newer set version (DDL) first evolves the Iceberg table
(pgshovel2.sparkjobs.evolve: ADD / RENAME COLUMN; a dropped column stays and
gets null in the rows the batch writes).

Exactly once: the commit's snapshot summary names the checkpoint and batch
id; a replayed batch (driver killed after the MERGE, before the checkpoint
committed) finds it and is skipped. The summary also carries the batch's end
offsets (from Spark's offset log): the Kafka position of the table's state,
which ``pgshovel audit --against iceberg`` compares at.
"""

import logging
import os

from pgshovel2.bootstrap.manifest import BootstrapError, Manifest
from pgshovel2.catalog import Table
from pgshovel2.codec import spark as spark_codec
from pgshovel2.sparkjobs import carry, changes, evolve, iceberg
from pgshovel2.sparkjobs.carry import KEEP
from pgshovel2.sparkjobs.materialize import BatchShapes, MaterializeOptions, _Job, latest_per_key
from pgshovel2.sparkjobs.session import require_class

log = logging.getLogger(__name__)


def run(spark, options: MaterializeOptions, catalog: iceberg.Catalog) -> None:
    """Create the Iceberg tables from the bootstrap if needed, then merge micro-batches until
    stopped (options.available_now: until caught up). Raises BootstrapError for an unusable
    bootstrap or missing jars; the stream's errors propagate (StreamingQueryException)."""
    manifest = Manifest.load(options.bootstrap)
    if manifest.output not in ("parquet", "iceberg"):
        raise BootstrapError(f"bootstrap {options.bootstrap} went to {manifest.output}: materialize --format "
                             "iceberg needs a Parquet or Iceberg bootstrap")
    if not options.stream or not options.checkpoint:
        raise BootstrapError("materialize --format iceberg runs as a stream: pass --stream --checkpoint DIR "
                             "(--available-now to stop when caught up)")
    iceberg.require_runtime(spark)
    require_class(spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider",
                  "pass the spark-sql-kafka-0-10 package (scripts/install.sh fetches it into .cache/spark-jars)")
    job = IcebergJob(spark, manifest, options)
    job.create_tables()
    job.stream()


class IcebergJob(_Job):
    """The Parquet job's Kafka reading and TRUNCATE decoding, with an Iceberg merge."""

    def __init__(self, spark, manifest: Manifest, options: MaterializeOptions):
        super().__init__(spark, manifest, options)
        self.checkpoint = os.path.abspath(options.checkpoint or "")

    def ident(self, table: Table) -> str:
        return iceberg.ident(self.manifest.set, table.schema, table.name)

    def create_tables(self) -> None:
        """CREATE TABLE AS the bootstrap copy (position '') for every table not created yet; an
        empty table for a table the bootstrap did not copy (added to the set later)."""
        from pyspark.sql import functions as sf

        copies = {(c.schema, c.name): c for c in self.manifest.tables}
        for t in self.topics.tables:
            table, copy = self.tables[(t.schema, t.name)], copies.get((t.schema, t.name))
            if not table.key:
                raise BootstrapError(f"table {table.qualified} has no key: an Iceberg MERGE needs one")
            target = self.ident(table)
            if iceberg.exists(self.spark, target):
                reopen(self.spark, target, str(self.manifest.handoff_point))
                continue
            if self.manifest.output == "iceberg" and copy is not None:
                raise BootstrapError(f"Iceberg table {target} of bootstrap {self.options.bootstrap} is missing "
                                     "from the catalog: pass the catalog the bootstrap wrote to")
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {target.rsplit('.', 1)[0]}")
            if copy is None:
                base = changes.empty_frame(self.spark, spark_codec.columns(table))
            else:
                base = self.spark.read.parquet(self.manifest.table_path(self.options.bootstrap, copy))
                base = base.withColumn(changes.POSITION, sf.lit(""))
            (base.writeTo(target).using("iceberg").tableProperty("format-version", "2")
             .tableProperty(iceberg.SET_KEY, self.manifest.set)
             .tableProperty(iceberg.HANDOFF_KEY, str(self.manifest.handoff_point))
             .tableProperty(iceberg.OFFSETS_KEY, _offsets_json(self.manifest))
             .create())
            log.info("created Iceberg table %s from the bootstrap (%d rows)", target, copy.rows if copy else 0)

    def refresh(self) -> None:
        """The Parquet job's refresh, then an empty Iceberg table for each table added."""
        super().refresh()
        self.create_tables()

    def merge(self, batch, batch_id: int) -> None:
        """Apply one micro-batch to every table (a MERGE per table that the batch changes)."""
        batch = batch.persist()
        try:
            truncated = self._truncations(batch)
            shape = BatchShapes(self, batch)
            ends = iceberg.batch_end_offsets(self.spark, self.options.checkpoint, batch_id)
            summary = {iceberg.CHECKPOINT_KEY: self.checkpoint, iceberg.BATCH_KEY: str(batch_id),
                       iceberg.END_OFFSETS_KEY: ends}
            for t in self.topics.tables:
                table = self.tables.get((t.schema, t.name))
                if table is None:  # a table added after the bootstrap and dropped before this job read the set
                    continue
                target = self.ident(table)
                if iceberg.committed(self.spark, target, self.checkpoint, batch_id):
                    log.info("%s: micro-batch %d was merged before a restart: skipping it", target, batch_id)
                    continue
                self._merge_table(table, t.topic, batch, batch_id, shape, truncated.get(t.topic), summary)
        finally:
            batch.unpersist()
        log.info("merged micro-batch %d", batch_id)

    def _merge_table(self, table: Table, topic: str, batch, batch_id: int, shape: BatchShapes,
                     truncated_at: str | None, summary: dict[str, str]) -> None:
        """One table's MERGE of the batch (none when the batch holds no change of it)."""
        from pyspark.sql import functions as sf

        target = self.ident(table)
        read_as, cols = shape.of(table, topic)
        rows = changes.change_frame(self.spark, batch, topic, read_as, cols, self.options.registry_url,
                                    str(self.manifest.handoff_point), self.copied, *self.wire)
        if truncated_at is not None:
            rows = rows.filter(sf.col(changes.POSITION) > truncated_at)
        rows = rows.persist()
        try:
            if truncated_at is None and rows.isEmpty():
                return
            dropped = evolve.evolve(self.spark, target, cols)
            latest = self._latest(read_as, cols, rows, None if truncated_at is not None else target,
                                  self.beyond(topic, read_as, cols, batch_id))
            view = f"pgshovel_batch_{abs(hash(target))}"
            latest.createOrReplaceTempView(view)
            statement = merge_sql(table, cols, dropped, target, view, truncated_at is not None)
            iceberg.run_with_summary(self.spark, statement, summary)
            self.spark.catalog.dropTempView(view)
        finally:
            rows.unpersist()

    def _latest(self, table: Table, cols: list, rows, target: str | None, beyond=None):
        """The batch's last change per key: logical columns (cols: BatchShapes.of), KEEP flags, op and
        position. table: as the batch's newest set version defines it (JSON sets); rows: its
        decoded changes (changes.change_frame, persisted); target: the Iceberg table lending the
        old keys' values to UPDATEs of the key (pgshovel2.sparkjobs.carry), None after a TRUNCATE;
        beyond: _Job.beyond."""
        lenders = None if target is None else (lambda olds: self._lenders(target, cols, rows.schema, olds))
        filled = carry.fill(rows, list(table.key), [c.name for c in cols], lenders=lenders, beyond=beyond)
        return latest_per_key(filled, table.key)

    def _lenders(self, target: str, cols: list, schema, olds):
        """target's rows of the keys in olds, as change rows (op r, offset -1); a column target
        lacks is listed unchanged (no value to lend)."""
        from pyspark.sql import functions as sf

        q = spark_codec.quote
        state = self.spark.table(target)
        have = set(state.columns)
        picked = state.join(olds, on=[c for c in olds.columns], how="left_semi")
        missing = [c.name for c in cols if c.name not in have]
        values = [sf.col(q(c.name)) if c.name in have else sf.lit(None).cast(schema[c.name].dataType).alias(c.name)
                  for c in cols]
        return picked.select(*values, sf.lit("r").alias(changes.OP), sf.col(changes.POSITION),
                             sf.lit(-1).cast("long").alias(changes.OFFSET),
                             sf.array(*[sf.lit(n) for n in missing]).cast("array<string>").alias(changes.UNCHANGED))


def reopen(spark, target: str, handoff: str) -> None:
    """Resume an existing Iceberg table at job start: check that it starts at this bootstrap's
    handoff (its property iceberg.HANDOFF_KEY; handoff: str of the manifest's handoff point), then
    make a fill of added columns that a killed driver left pending (evolve.fill).

    Raises BootstrapError when the table was started from another bootstrap.
    """
    props = iceberg.properties(spark, target)
    recorded = props.get(iceberg.HANDOFF_KEY)
    if recorded != handoff:
        raise BootstrapError(f"Iceberg table {target} starts at handoff {recorded!r}, not at this bootstrap's "
                             f"{handoff}: use its own bootstrap or a new catalog")
    evolve.fill(spark, target, evolve.pending_fills(props))


def merge_sql(table: Table, cols: list, dropped: list[str], target: str, source: str, truncated: bool) -> str:
    """The MERGE INTO statement applying source (IcebergJob._latest rows of cols) to target;
    dropped: target's columns the batch does not carry (DROP COLUMN), null in the rows it writes."""
    q = spark_codec.quote
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in table.key)
    sets = [f"{q(c.name)} = CASE WHEN s.{KEEP}{i} THEN t.{q(c.name)} ELSE s.{q(c.name)} END"
            for i, c in enumerate(cols)] + [f"{q(n)} = NULL" for n in dropped]
    sets.append(f"{changes.POSITION} = s.{changes.POSITION}")
    names = [q(c.name) for c in cols] + [changes.POSITION]
    nulls = [q(n) for n in dropped]
    statement = (f"MERGE INTO {target} t USING {source} s ON {on} "
                 f"WHEN MATCHED AND s.{changes.OP} = 'd' THEN DELETE "
                 f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
                 f"WHEN NOT MATCHED AND s.{changes.OP} <> 'd' THEN INSERT ({', '.join(names + nulls)}) "
                 f"VALUES ({', '.join(['s.' + n for n in names] + ['NULL'] * len(nulls))})")
    if truncated:
        statement += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
    return statement


def _offsets_json(manifest: Manifest) -> str:
    import json

    return json.dumps(manifest.kafka_offsets, sort_keys=True)
