"""Columns added with a DEFAULT reach the rows an Iceberg table already holds (evolve.evolve):
those rows get the value PostgreSQL gives the rows that existed at ADD COLUMN, rows written after
keep theirs; a job killed between the ADD COLUMN and the UPDATE fills when it starts again. Local
Spark (the tests' session, the catalog registered at run time), a Hadoop catalog under tmp_path."""

import dataclasses

import pytest

from pgshovel2.bootstrap.manifest import BootstrapError
from pgshovel2.codec import spark as spark_codec
from pgshovel2.sparkjobs import evolve, iceberg, icemerge

TARGET = f"{iceberg.CATALOG}.fill.t"


@pytest.fixture(scope="module")
def catalog(spark, tmp_path_factory):
    """The catalog, once per session's JVM (Spark keeps a catalog it loaded), then unregistered."""
    settings = iceberg.Catalog("hadoop", str(tmp_path_factory.mktemp("warehouse"))).settings()
    del settings["spark.sql.extensions"]  # static; Spark 4 runs UPDATE on Iceberg without them
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield spark
    for key in settings:
        spark.conf.unset(key)


@pytest.fixture
def table(catalog):
    spark = catalog
    spark.sql(f"CREATE TABLE {TARGET} (id int, n int) USING iceberg")
    spark.sql(f"INSERT INTO {TARGET} VALUES (1, 10), (2, 20)")
    yield spark
    spark.sql(f"DROP TABLE {TARGET}")


def _cols(spark) -> list[spark_codec.SparkColumn]:
    from pyspark.sql import types as st

    def col(name, physical, default=None):
        return spark_codec.SparkColumn(name, name, physical, None, "{}", True, (), default)
    return [col("id", st.IntegerType()), col("n", st.IntegerType()),
            col("label", st.StringType(), "it's \\ n/a é"), col("tier", st.IntegerType(), 7),
            col("on", st.BooleanType(), False), col("x", st.DoubleType(), 2.5), col("plain", st.StringType())]


def _rows(spark) -> list[tuple]:
    return [tuple(r) for r in spark.sql(f"SELECT * FROM {TARGET} ORDER BY id").collect()]


def test_added_columns_fill_the_older_rows(table):
    cols = _cols(table)
    assert evolve.evolve(table, TARGET, cols) == []
    label = "it's \\ n/a é"
    assert _rows(table) == [(1, 10, label, 7, False, 2.5, None), (2, 20, label, 7, False, 2.5, None)]
    props = {r["key"] for r in table.sql(f"SHOW TBLPROPERTIES {TARGET}").collect()}
    assert evolve.FILL_PROPERTY not in props
    table.sql(f"INSERT INTO {TARGET} VALUES (3, 30, NULL, 8, true, NULL, NULL)")  # written after: kept
    renamed = [dataclasses.replace(c, name="rank", aliases=("tier",)) if c.name == "tier" else c for c in cols]
    evolve.evolve(table, TARGET, renamed)  # a later batch (a rename): fills nothing again
    assert _rows(table)[2] == (3, 30, None, 8, True, None, None)


def test_a_fill_interrupted_after_add_column_is_made_on_restart(table):
    table.sql(f"ALTER TABLE {TARGET} SET TBLPROPERTIES ('{iceberg.HANDOFF_KEY}' = 'h1')")
    evolve._set_fills(table, TARGET, {"tier": 7})  # what evolve records, then the ADD, then a SIGKILL
    table.sql(f"ALTER TABLE {TARGET} ADD COLUMN tier int")
    with pytest.raises(BootstrapError, match="starts at handoff 'h1'"):
        icemerge.reopen(table, TARGET, "h2")  # another bootstrap's table: refused, nothing filled
    assert _tiers(table) == [None, None]
    icemerge.reopen(table, TARGET, "h1")  # what the restarted job does for each existing table
    assert _tiers(table) == [7, 7]
    assert evolve.FILL_PROPERTY not in iceberg.properties(table, TARGET)


def _tiers(spark) -> list:
    return [r["tier"] for r in spark.sql(f"SELECT tier FROM {TARGET} ORDER BY id").collect()]
