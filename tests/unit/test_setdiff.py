"""What differs between two versions of a set's tables is named per table and column
(pgshovel2.ops.setdiff: set upgrade --dry-run, set inspect --history)."""

from dataclasses import replace

from pgshovel2.catalog import Column, Table
from pgshovel2.ops.setdiff import TableChange, table_changes

ID = Column("id", 1, "integer", "int4", False, False)
NAME = Column("name", 2, "text", "text", False, True)
PRICE = Column("price", 3, "numeric(10,2)", "numeric", False, True, 10, 2)
PRODUCTS = Table("public", "products", (ID, NAME, PRICE), ("id",), "primary key")
ORDERS = Table("public", "orders", (ID,), ("id",), "primary key")


def topic(table: Table) -> str:
    return f"p.{table.schema}.{table.name}" + (f".g{table.generation}" if table.generation > 1 else "")


def diff(before, after) -> list[TableChange]:
    return table_changes(before, after, topic, topic)


def test_columns_added_removed_retyped_nullability():
    after = replace(PRODUCTS, columns=(ID, replace(NAME, nullable=False),
                                       replace(PRICE, pg_type="numeric(12,2)", precision=12),
                                       Column("sku", 4, "text", "text", False, True)))
    [change] = diff((PRODUCTS,), (after,))
    text = change.describe()
    assert text.startswith('changed table "public"."products"; ')
    assert "columns added: sku" in text and "columns retyped: price: numeric(10,2) -> numeric(12,2)" in text
    assert "nullability: name: null -> not null" in text
    assert change.to_dict() == {"table": '"public"."products"', "kind": "changed", "columns_added": ["sku"],
                                "columns_retyped": ["price: numeric(10,2) -> numeric(12,2)"],
                                "columns_nullability": ["name: null -> not null"]}


def test_rename_key_topic_and_tables_added_removed():
    after = replace(PRODUCTS, columns=(ID, replace(NAME, name="title", aliases=("name",)), PRICE),
                    key=("id", "title"), key_source="config", generation=2)
    changes = diff((PRODUCTS, ORDERS), (after, replace(ORDERS, name="invoices")))
    assert [(c.table, c.kind) for c in changes] == [('"public"."invoices"', "added"), ('"public"."orders"', "removed"),
                                                    ('"public"."products"', "changed")]
    text = changes[2].describe()
    assert "columns renamed: name -> title" in text and "key (id) -> (id, title)" in text
    assert "key from primary key -> config" in text and "topic p.public.products -> p.public.products.g2" in text


def test_a_change_nothing_else_names_is_still_named():
    after = replace(PRODUCTS, columns=(ID, NAME, replace(PRICE, default="0.00")))
    [change] = diff((PRODUCTS,), (after,))
    assert change.describe() == 'changed table "public"."products"; columns changed: price: default'


def test_same_tables_no_change():
    assert diff((PRODUCTS, ORDERS), (ORDERS, PRODUCTS)) == []


def test_other_settings_are_named_never_dropped_silently():
    from pgshovel2.config import parse_config
    from pgshovel2.ops.setdiff import settings
    from pgshovel2.ops.upgrade import UpgradePlan

    before = parse_config({"database": {"dsn": "dbname=x"}, "tables": ["t"]}, "f.yaml")
    after = parse_config({"database": {"dsn": "dbname=x", "relay_dsn": "user=r password=env:P"}, "tables": ["t"],
                          "topics": {"partitions": 3}}, "f.yaml")
    found = settings(before, after)
    assert found == ["relay_dsn: changed", "topics.partitions: 1 -> 3"]
    idle = UpgradePlan("s", 4, 5, [], [], [], settings=found)
    assert not idle.changes and idle.lines()[1].startswith("  not applied: relay_dsn: changed")
    with_table = UpgradePlan("s", 4, 5, [TableChange('"public"."t"', "added")], [], [], settings=found)
    assert "  setting stored with the version: topics.partitions: 1 -> 3" in with_table.lines()
    assert with_table.to_dict()["settings"] == found
