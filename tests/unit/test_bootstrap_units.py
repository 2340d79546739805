"""Pure parts of the bootstrap: txid visibility, the Spark column mapping, the manifest, DSN -> JDBC."""

import decimal

import pytest

from pgshovel2.bootstrap.manifest import BootstrapError, Manifest, TableCopy
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import spark as spark_codec
from pgshovel2.redact import dsn as redacted
from pgshovel2.txids import TxidSnapshot


def test_txid_visibility_is_postgres_rule():
    snap = TxidSnapshot.parse("100:110:102,105")
    assert [t for t in range(98, 112) if snap.visible(t)] == [98, 99, 100, 101, 103, 104, 106, 107, 108, 109]
    assert str(snap) == "100:110:102,105"
    assert TxidSnapshot.parse("7:7:").visible(6) and not TxidSnapshot.parse("7:7:").visible(7)
    for bad in ("1:2", "a:b:", "5:3:", "1:5:9"):
        with pytest.raises(ValueError, match="txid snapshot"):
            TxidSnapshot.parse(bad)


def _col(name, kind, attnum, is_array=False, precision=None, scale=None):
    return Column(name, attnum, kind, kind, is_array, True, precision, scale)


def test_spark_columns_follow_the_avro_mapping():
    table = Table("s", "t", (_col("id", "int8", 1), _col("n", "numeric", 2, precision=10, scale=2),
                             _col("w", "numeric", 3, precision=60, scale=5), _col("d", "date", 4),
                             _col("tz", "timestamptz", 5), _col("ts", "timestamp", 6), _col("da", "date", 7, True),
                             _col("my col", "text", 8)), ("id",), "primary key")
    cols = spark_codec.columns(table)
    assert [c.physical.simpleString() for c in cols] == ["bigint", "decimal(10,2)", "string", "int", "bigint",
                                                         "bigint", "array<int>", "string"]
    assert spark_codec.logical_exprs(cols)[3] == "date_from_unix_date(`d`) AS `d`"
    assert spark_codec.logical_exprs(cols)[5] == "CAST(timestamp_micros(`ts`) AS TIMESTAMP_NTZ) AS `ts`"
    assert spark_codec.logical_exprs(cols)[6] == "transform(`da`, x -> date_from_unix_date(x)) AS `da`"
    assert cols[7].field == "my_x20col"
    row = spark_codec.physical_row(cols, [1, (-1234).to_bytes(2, "big", signed=True), (5).to_bytes(1, "big"),
                                          19000, 1, 2, [1, None], "x"])
    assert row[1] == decimal.Decimal("-12.34") and row[2] == "0.00005"
    by_field = spark_codec.physical_row(cols, {"id": 3, "my_x20col": "y"})
    assert by_field == [3, None, None, None, None, None, None, "y"]


def test_manifest_round_trip_and_missing(tmp_path):
    manifest = Manifest("s", "c", 3, {"config": {}, "tables": []}, "parquet",
                        [TableCopy("public", "t", "s.public.t", "tables/public.t", 2, "99", 1)],
                        {"backend": "trigger", "txid_snapshot": "5:9:6"}, {"s.public.t": {"0": 4}},
                        "2026-01-01T00:00:00Z")
    manifest.write(tmp_path)
    loaded = Manifest.load(tmp_path)
    assert loaded == manifest and loaded.offsets() == {("s.public.t", 0): 4}
    assert not loaded.txid_snapshot.visible(6) and loaded.txid_snapshot.visible(7)
    assert loaded.table_path(tmp_path, loaded.tables[0]) == str(tmp_path / "tables/public.t")
    with pytest.raises(BootstrapError, match="did not complete"):
        Manifest.load(tmp_path / "nothing")


def test_dsn_redacted():  # the JDBC form of a connection: tests/integration/test_secure_postgres.py
    assert "secret" not in redacted("host=h dbname=d password=secret")


def test_spark_arrays_of_any_shape_are_flattened():
    """A Spark array column is one-dimensional: multi-dimensional values are flattened in storage
    order and lower bounds dropped (pgshovel2.codec.spark), instead of failing."""
    table = Table("s", "t", (_col("id", "int4", 1), _col("ia", "int4", 2, True),
                             _col("na", "numeric", 3, True, precision=5, scale=1)), ("id",), "primary key")
    cols = spark_codec.columns(table)
    assert [c.physical.simpleString() for c in cols] == ["int", "array<int>", "array<decimal(5,1)>"]
    one = (15).to_bytes(1, "big")
    row = spark_codec.physical_row(cols, [1, [[1, None], [3, 4]], {"lower_bounds": [0], "elements": [one, None]}])
    assert row == [1, [1, None, 3, 4], [decimal.Decimal("1.5"), None]]
    assert spark_codec.physical_row(cols, [2, {"lower_bounds": [2, 0], "elements": [[5]]}, []])[1:] == [[5], []]


def test_columns_of_a_registered_schema_equal_the_tables_and_read_renamed_fields():
    """evolve reads a batch's columns from the value schema the relay registered: same types as
    spark_codec.columns of the table; a renamed column reads datums written under its old name."""
    from pgshovel2.codec import avro

    table = Table("s", "t", (_col("id", "int8", 1), _col("n", "numeric", 2, precision=10, scale=2),
                             _col("d", "date", 3), _col("da", "date", 4, True),
                             Column("memo", 5, "text", "text", False, True, aliases=("my note",))),
                  ("id",), "primary key")
    fields = avro.value_schema("ice", table)["fields"]
    cols = [spark_codec.from_field(f) for f in fields]
    expected = spark_codec.columns(table)
    assert [(c.name, c.field, c.physical, c.sql) for c in cols] == [(c.name, c.field, c.physical, c.sql)
                                                                    for c in expected]
    assert cols[4].aliases == ("my_x20note",)
    old = {"id": 1, "n": (1234).to_bytes(2, "big"), "d": 3, "da": [[1, 2]], "my_x20note": "before"}
    assert spark_codec.physical_row(cols, old) == [1, decimal.Decimal("12.34"), 3, [1, 2], "before"]
    assert spark_codec.physical_row(cols, {"id": 2}) == [2, None, None, None, None]  # added later: null
