"""The SparkSession of the jobs: settings they rely on, the JDBC driver and Kafka connector jars.

Jars: the PostgreSQL JDBC driver (Debian's libpostgresql-jdbc-java,
``/usr/share/java/postgresql.jar``), spark-sql-kafka-0-10 with its
dependencies and iceberg-spark-runtime-4.0_2.13 (fetched from Maven Central by
scripts/install.sh into ``.cache/spark-jars``). Under spark-submit on a cluster pass them with
``--jars``/``--packages`` instead; they are then already on the classpath.
"""

import glob
import logging
import os
import sys
from pathlib import Path

from pgshovel2.bootstrap.manifest import BootstrapError

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"
DEFAULT_SPARK_JARS = str(REPO / ".cache" / "spark-jars")
SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.ui.showConsoleProgress": "true",
}
LOCAL_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
}


def jars(jdbc_jar: str | None = None, spark_jars: str | None = None) -> list[str]:
    """The jar files to put on a local session's classpath.

    jdbc_jar: the PostgreSQL JDBC driver (default PGSHOVEL_JDBC_JAR or
    /usr/share/java/postgresql.jar); spark_jars: folder of the Kafka
    connector jars (default PGSHOVEL_SPARK_JARS or .cache/spark-jars).
    Raises BootstrapError naming a missing JDBC jar.
    """
    jdbc = jdbc_jar or os.environ.get("PGSHOVEL_JDBC_JAR", DEFAULT_JDBC_JAR)
    if not os.path.isfile(jdbc):
        raise BootstrapError(f"PostgreSQL JDBC driver not found at {jdbc}: install Debian's "
                             "libpostgresql-jdbc-java (scripts/install.sh does) or pass --jdbc-jar")
    folder = spark_jars or os.environ.get("PGSHOVEL_SPARK_JARS", DEFAULT_SPARK_JARS)
    kafka = sorted(glob.glob(os.path.join(folder, "*.jar")))
    if not kafka:
        log.warning("no Kafka connector jars in %s (scripts/install.sh fetches them): reading Kafka "
                    "from Spark will fail", folder)
    return [jdbc, *kafka]


def session(master: str | None = "local[*]", app: str = "pgshovel2", jar_files: list[str] | None = None,
            settings: dict[str, str] | None = None):
    """A SparkSession. master None: whatever spark-submit configured (cluster runs).

    With a master (local runs), the jars are added and the local settings
    (no UI, 127.0.0.1 only) applied.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    conf = dict(SETTINGS)
    if master is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import pgshovel2 from this venv
        builder = builder.master(master)
        conf.update(LOCAL_SETTINGS)
        conf["spark.jars"] = ",".join(jar_files if jar_files is not None else jars())
    conf.update(settings or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def require_class(spark, name: str, what: str) -> None:
    """Raise BootstrapError unless the JVM of spark can load class name (what: how to get it)."""
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(name, True,
                                                         spark.sparkContext._jvm.Thread.currentThread()
                                                         .getContextClassLoader())
    except Exception as exc:  # py4j.protocol.Py4JJavaError: ClassNotFoundException
        raise BootstrapError(f"class {name} is not on Spark's classpath: {what}") from exc
