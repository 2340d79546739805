"""The bootstrap job's Iceberg output: one Iceberg table per captured table, written from the
consistent snapshot, with the handoff and the stream's start offsets in the table's properties
(pgshovel2.sparkjobs.iceberg names them) so that ``materialize --format iceberg`` continues from
exactly there."""

import json
import logging

from pgshovel2.bootstrap.manifest import BootstrapError, TableCopy
from pgshovel2.catalog import Table
from pgshovel2.sparkjobs import iceberg
from pgshovel2.sparkjobs.changes import POSITION

log = logging.getLogger(__name__)


class Tables:
    """The Iceberg tables of one bootstrap of set_name. kafka_offsets: topic -> partition -> offset
    where the stream after the handoff starts (the manifest's)."""

    def __init__(self, spark, set_name: str, kafka_offsets: dict[str, dict[str, int]]):
        self.spark, self.set_name = spark, set_name
        self.offsets = json.dumps(kafka_offsets, sort_keys=True)
        self.created: list[str] = []

    def check_absent(self, tables: list[Table]) -> None:
        """Raise BootstrapError naming a table that exists already (or has no key: MERGE needs one)."""
        iceberg.require_runtime(self.spark)
        for table in tables:
            if not table.key:
                raise BootstrapError(f"table {table.qualified} has no key: an Iceberg MERGE needs one")
            target = iceberg.ident(self.set_name, table.schema, table.name)
            if iceberg.exists(self.spark, target):
                raise BootstrapError(f"Iceberg table {target} exists already: drop it or bootstrap another set")

    def write(self, table: Table, frame, topic: str, partitions: int, handoff: str) -> TableCopy:
        """CREATE TABLE AS frame (the logical columns, position '') with the handoff in its properties;
        returns its TableCopy (path None, rows and xxhash64 checksum read back from Iceberg)."""
        from pyspark.sql import functions as sf

        target = iceberg.ident(self.set_name, table.schema, table.name)
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {target.rsplit('.', 1)[0]}")
        (frame.withColumn(POSITION, sf.lit("")).writeTo(target).using("iceberg")
         .tableProperty("format-version", "2").tableProperty(iceberg.SET_KEY, self.set_name)
         .tableProperty(iceberg.HANDOFF_KEY, handoff).tableProperty(iceberg.OFFSETS_KEY, self.offsets)
         .create())
        self.created.append(target)
        n, checksum = self.spark.table(target).drop(POSITION).selectExpr(
            "count(*)", "CAST(coalesce(sum(CAST(xxhash64(*) AS DECIMAL(38,0))), 0) AS STRING)").first()
        return TableCopy(table.schema, table.name, topic, None, int(n), checksum, partitions)

    def drop_created(self) -> None:
        """Drop (PURGE) the tables this bootstrap created: a failed bootstrap leaves none behind."""
        for target in self.created:
            try:
                self.spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
            except Exception:  # the bootstrap's own error is the one reported
                log.exception("could not drop %s after the failed bootstrap", target)
