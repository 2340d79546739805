"""Apache Iceberg tables of a set: the catalog, table names, properties and commit markers.

Catalog: ``hadoop:WAREHOUSE`` (Iceberg's Hadoop catalog, tables under a
warehouse directory: any path Hadoop's FileSystem reads, here a shared POSIX
directory). It is registered in the Spark session as catalog ``pgshovel``
(``spark.sql.catalog.pgshovel``) with Iceberg's SQL extensions (MERGE INTO).
The runtime jar is ``org.apache.iceberg:iceberg-spark-runtime-4.0_2.13``
(scripts/install.sh fetches it into .cache/spark-jars; spark-submit --jars).

Table of a captured table ``schema.name`` of set S: ``pgshovel.S.schema.name``
(namespace [S, schema]); its columns are the captured columns (the Spark
types of pgshovel2.codec.spark) plus ``__pgshovel_position``, the position of
the change that wrote the row ('' for bootstrap rows).

Exactly once: every commit of the materialize job carries, in the Iceberg
snapshot summary, ``pgshovel.checkpoint`` (the streaming checkpoint) and
``pgshovel.batch`` (the micro-batch id); a batch the table already committed
is skipped after a restart. The keys: pgshovel2.bootstrap.iceberg_keys.
"""

from dataclasses import dataclass

from pgshovel2.bootstrap.iceberg_keys import (  # noqa: F401  (the keys, for the jobs and the tests)
    BATCH_KEY,
    CHECKPOINT_KEY,
    END_OFFSETS_KEY,
    HANDOFF_KEY,
    OFFSETS_KEY,
    SET_KEY,
)
from pgshovel2.bootstrap.manifest import BootstrapError

CATALOG = "pgshovel"
RUNTIME_CLASS = "org.apache.iceberg.spark.SparkCatalog"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


@dataclass(frozen=True)
class Catalog:
    """An Iceberg catalog given as ``hadoop:WAREHOUSE`` (kind 'hadoop', location: the warehouse path)."""

    kind: str
    location: str

    @classmethod
    def parse(cls, text: str) -> "Catalog":
        """``hadoop:/path``; raises BootstrapError naming a malformed or unsupported catalog."""
        kind, sep, location = text.partition(":")
        if not sep or not location or kind != "hadoop":
            raise BootstrapError(f"unsupported Iceberg catalog {text!r}: use hadoop:WAREHOUSE_PATH")
        return cls(kind, location)

    def settings(self) -> dict[str, str]:
        """Spark session settings registering this catalog as ``pgshovel`` (set before the session starts)."""
        prefix = f"spark.sql.catalog.{CATALOG}"
        return {"spark.sql.extensions": EXTENSIONS, prefix: RUNTIME_CLASS, f"{prefix}.type": self.kind,
                f"{prefix}.warehouse": self.location}


def require_runtime(spark) -> None:
    """Raise BootstrapError unless Iceberg's Spark runtime and the ``pgshovel`` catalog are configured."""
    from pgshovel2.sparkjobs.session import require_class

    require_class(spark, RUNTIME_CLASS, "pass iceberg-spark-runtime-4.0_2.13 (scripts/install.sh fetches it "
                  "into .cache/spark-jars; spark-submit --jars)")
    if not spark.conf.get(f"spark.sql.catalog.{CATALOG}", None):
        raise BootstrapError(f"no Iceberg catalog {CATALOG!r} in the Spark session: pass --catalog hadoop:PATH")


def quote(part: str) -> str:
    """A Spark SQL identifier part in backquotes."""
    return "`" + part.replace("`", "``") + "`"


def ident(set_name: str, schema: str, name: str) -> str:
    """The Spark SQL name of a captured table's Iceberg table: pgshovel.`set`.`schema`.`name`."""
    return ".".join([CATALOG, quote(set_name), quote(schema), quote(name)])


def exists(spark, table: str) -> bool:
    """True when the Iceberg table (ident form) exists."""
    return bool(spark.catalog.tableExists(table))


def properties(spark, table: str) -> dict[str, str]:
    """The table's properties."""
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def last_commit(spark, table: str) -> dict[str, str]:
    """The snapshot summary of the table's current snapshot ({} for a table without snapshots)."""
    rows = spark.sql(f"SELECT s.summary FROM {table}.snapshots s JOIN {table}.history h "
                     "ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor "
                     "ORDER BY h.made_current_at DESC LIMIT 1").collect()
    return dict(rows[0]["summary"]) if rows else {}


def committed(spark, table: str, checkpoint: str, batch_id: int) -> bool:
    """True when the table's current snapshot was written by this checkpoint's batch >= batch_id."""
    summary = last_commit(spark, table)
    return summary.get(CHECKPOINT_KEY) == checkpoint and int(summary.get(BATCH_KEY, -1)) >= batch_id


def batch_end_offsets(spark, checkpoint: str, batch_id: int) -> str:
    """The end offsets (exclusive) of micro-batch batch_id, as JSON {topic: {partition: offset}}:
    the last line of Spark's offset log ``<checkpoint>/offsets/<batch_id>``, which Spark writes
    before it runs the batch, read through Hadoop's FileSystem (any file system the checkpoint is
    on). Raises py4j's Py4JJavaError when the log file cannot be read."""
    sc = spark.sparkContext
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/{batch_id}")
    stream = path.getFileSystem(sc._jsc.hadoopConfiguration()).open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return text.strip().splitlines()[-1]


class _Statement:
    """A java.util.concurrent.Callable running one SQL statement (py4j callback)."""

    class Java:
        implements = ["java.util.concurrent.Callable"]

    def __init__(self, spark, statement: str):
        self.spark, self.statement = spark, statement

    def call(self):
        self.spark.sql(self.statement)
        return None


def run_with_summary(spark, statement: str, summary: dict[str, str]) -> None:
    """Run statement (a MERGE/INSERT on an Iceberg table) so that the snapshot it commits carries
    summary (Iceberg's CommitMetadata.withCommitProperties: a thread-local of this py4j thread)."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    ensure_callback_server_started(sc._gateway)
    jvm = sc._jvm
    props = jvm.java.util.HashMap()
    for key, value in summary.items():
        props.put(key, value)
    error = jvm.java.lang.Class.forName("java.lang.RuntimeException")
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(props, _Statement(spark, statement), error)
