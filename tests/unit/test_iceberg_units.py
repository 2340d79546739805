"""Pure parts of the Iceberg work: catalog parsing, identifiers, the MERGE statement, the audit's
key-range checksums."""

import pytest

from pgshovel2.bootstrap.manifest import BootstrapError
from pgshovel2.ops.audit import checksums, differing_keys
from pgshovel2.sparkjobs import iceberg


def test_catalog_parse_and_settings():
    cat = iceberg.Catalog.parse("hadoop:/data/wh")
    assert (cat.kind, cat.location) == ("hadoop", "/data/wh")
    assert cat.settings()["spark.sql.catalog.pgshovel.warehouse"] == "/data/wh"
    for bad in ("hadoop:", "/data/wh", "hive:thrift://x"):
        with pytest.raises(BootstrapError, match="hadoop:WAREHOUSE_PATH"):
            iceberg.Catalog.parse(bad)


def test_ident_quotes_every_part():
    assert iceberg.ident("s1", "my`schema", "t.x") == "pgshovel.`s1`.`my``schema`.`t.x`"


def test_differing_keys_names_only_the_changed_rows():
    source = {(k,): (k, f"v{k}") for k in range(1, 3001)}
    target = dict(source)
    target[(1500,)] = (1500, "hand-changed")
    del target[(2999,)]
    target[(5000,)] = (5000, "extra")
    buckets, bad, keys = differing_keys(source, target, 1000)
    assert keys == {(1500,), (2999,), (5000,)}
    assert (buckets, bad) == (5, 3)  # buckets 0..3 and 5; 1, 2 and 5 differ
    assert differing_keys(source, dict(source), 1000)[1:] == (0, set())


def test_checksums_do_not_depend_on_insertion_order():
    rows = {("b",): ("b", 1), ("a",): ("a", 2)}
    assert checksums(rows, 10) == checksums(dict(reversed(rows.items())), 10)
