"""schema_change rules: which DDL changes of a captured table the relay follows, and the errors."""

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.errors import SchemaChangeError
from pgshovel2.relay.schema_change import new_table

# Catalog rows as pgshovel2.table_columns() writes them.
ID = ["id", 1, "integer", False, "int4", "b", False, None, None, -1, None]
NAME = ["name", 2, "text", True, "text", "b", False, None, None, -1, None]
QTY = ["qty", 3, "integer", True, "int4", "b", False, None, None, -1, None]

CURRENT = Table("s", "t", (Column("id", 1, "integer", "int4", False, False),
                           Column("name", 2, "text", "text", False, True),
                           Column("qty", 3, "integer", "int4", False, True)), ("id",), "primary key")


def payload(*columns: list, key: tuple = (1,), **extra) -> dict:
    return {"schema": "s", "name": "t", "dropped": False, "columns": list(columns), "key": list(key), **extra}


def change(p: dict) -> Table | None:
    return new_table("set1", CURRENT, p, "ALTER TABLE s.t ...")


def test_unchanged_layout_is_no_change():
    assert change(payload(ID, NAME, QTY)) is None


def test_add_nullable_column_gets_null_default():
    t = change(payload(ID, NAME, QTY, ["note", 4, "text", True, "text", "b", False, None, None, -1, None]))
    field = avro.value_schema("set1", t)["fields"][3]
    assert field["name"] == "note" and field["type"] == ["null", "string"] and field["default"] is None


def test_add_not_null_column_with_constant_default():
    t = change(payload(ID, NAME, QTY, ["flag", 4, "integer", False, "int4", "b", False, None, None, -1, 7]))
    field = avro.value_schema("set1", t)["fields"][3]
    assert field["type"] == "int" and field["default"] == 7


@pytest.mark.parametrize("row, field_type, default", [
    (["note", 4, "text", True, "text", "b", False, None, None, -1, "n/a"], ["string", "null"], "n/a"),
    (["on", 4, "boolean", True, "bool", "b", False, None, None, -1, False], ["boolean", "null"], False),
    (["x", 4, "double precision", True, "float8", "b", False, None, None, -1, 2.5], ["double", "null"], 2.5),
    # defaults Avro cannot hold as the wire writes them: older rows read as null (logged)
    (["j", 4, "jsonb", True, "jsonb", "b", False, None, None, -1, {"a": 1}], ["null", "string"], None),
    (["m", 4, "numeric", True, "numeric", "b", False, None, None, -1, 1.5], ["null", "string"], None),
    (["t", 4, "timestamp with time zone", True, "timestamptz", "b", False, None, None, -1, "2020-01-01T00:00:00+00:00"],
     ["null", {"type": "long", "logicalType": "timestamp-micros"}], None),
])
def test_add_nullable_column_with_default(row, field_type, default):
    """The rows existing before read as the value PostgreSQL gives them, where Avro can say it:
    a union with the value's branch first, whose default is that value."""
    t = change(payload(ID, NAME, QTY, row))
    field = avro.value_schema("set1", t)["fields"][3]
    assert field["type"] == field_type and field["default"] == default
    assert t.columns[3].default == default


def test_drop_not_null_keeps_the_default():
    t = change(payload(ID, NAME, QTY, ["flag", 4, "integer", False, "int4", "b", False, None, None, -1, 7]))
    t = new_table("set1", t, payload(ID, NAME, QTY, ["flag", 4, "integer", True, "int4", "b", False, None, None,
                                                       -1, 7]), "ALTER TABLE s.t ALTER flag DROP NOT NULL")
    field = avro.value_schema("set1", t)["fields"][3]
    assert field["type"] == ["int", "null"] and field["default"] == 7


@pytest.mark.parametrize("row", [
    ["n", 4, "integer", False, "int4", "b", False, None, None, -1, None],  # no value for old rows
    ["n", 4, "numeric(5,2)", False, "numeric", "b", False, None, None, 589830, 1.5],  # decimal bytes
    ["n", 4, "double precision", False, "float8", "b", False, None, None, -1, "NaN"],
    ["n", 4, "jsonb", False, "jsonb", "b", False, None, None, -1, {"a": 1}],  # str() is no JSON text
    ["n", 4, "money", False, "money", "b", False, None, None, -1, "$1.00"],  # the wire writes 1.00
])
def test_add_not_null_column_without_avro_default_stops(row):
    with pytest.raises(SchemaChangeError, match=r"NOT NULL column 'n'.*set 'set1'|set 'set1'.*NOT NULL column 'n'"):
        change(payload(ID, NAME, QTY, row))


def test_drop_non_key_column():
    t = change(payload(ID, QTY))
    assert [c.name for c in t.columns] == ["id", "qty"] and t.key == ("id",)


def test_rename_column_keeps_alias():
    t = change(payload(ID, ["title", 2, "text", True, "text", "b", False, None, None, -1, None], QTY))
    field = avro.value_schema("set1", t)["fields"][1]
    assert field["name"] == "title" and field["aliases"] == ["name"]
    back = new_table("set1", t, payload(ID, NAME, QTY), "rename back")
    assert back.columns[1].name == "name" and back.columns[1].aliases == ("title",)


def test_varchar_length_change_keeps_avro_type():
    t = change(payload(ID, ["name", 2, "character varying(20)", True, "varchar", "b", False, None, None, 24, None],
                       QTY))
    assert t.columns[1].pg_type == "character varying(20)"


def test_nullability_changes_stay_compatible():
    t = change(payload(ID, ["name", 2, "text", False, "text", "b", False, None, None, -1, None], QTY))
    assert t is None or t.columns[1].nullable  # SET NOT NULL: the field stays nullable
    cur = Table("s", "t", (CURRENT.columns[0], Column("name", 2, "text", "text", False, False)), ("id",), "pk")
    t = new_table("set1", cur, payload(ID, NAME), "DROP NOT NULL")
    assert t.columns[1].nullable


def test_type_change_stops_naming_table_and_statement():
    with pytest.raises(SchemaChangeError) as err:
        change(payload(ID, NAME, ["qty", 3, "bigint", True, "int8", "b", False, None, None, -1, None]))
    text = str(err.value)
    assert "'set1'" in text and '"s"."t"' in text and "ALTER TABLE s.t ..." in text
    assert "column 'qty' changed type from integer to bigint" in text


@pytest.mark.parametrize("p, reason", [
    (payload(NAME, QTY, key=()), r"key column\(s\) 'id' dropped"),
    (payload(["ident", 1, "integer", False, "int4", "b", False, None, None, -1, None], NAME, QTY), "key column 'id'"),
    (payload(["id", 1, "bigint", False, "int8", "b", False, None, None, -1, None], NAME, QTY), "changed type"),
    ({"schema": "s", "name": "t", "dropped": True}, "the table was dropped"),
    (payload(ID, NAME, QTY) | {"name": "t2"}, "renamed to s.t2"),
])
def test_incompatible_changes_stop(p, reason):
    with pytest.raises(SchemaChangeError, match=reason):
        change(p)
