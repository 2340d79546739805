"""schema_change rules: which DDL changes of a captured table the relay follows, and the errors."""

import pytest

from pgshovel2.catalog import Column, Table, column_from_row
from pgshovel2.codec import avro
from pgshovel2.errors import SchemaChangeError
from pgshovel2.relay.ddl.schema_change import new_table

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


def test_type_change_stops_naming_table_statement_and_remedy():
    with pytest.raises(SchemaChangeError) as err:
        change(payload(ID, NAME, ["qty", 3, "text", True, "text", "b", False, None, None, -1, None]))
    text = str(err.value)
    assert "'set1'" in text and '"s"."t"' in text and "ALTER TABLE s.t ..." in text
    assert "column 'qty' changed type from integer to text" in text
    assert "'pgshovel set accept-ddl set1 s.t'" in text and "'pgshovel set accept-ddl set1 s.t --new-topic'" in text
    assert not err.value.key_change and err.value.table == '"s"."t"' and err.value.reason.startswith("column 'qty'")


def numeric(name: str, attnum: int, precision: int, scale: int, nullable: bool = True) -> list:
    typmod = ((precision << 16) | scale) + 4
    return [name, attnum, f"numeric({precision},{scale})", nullable, "numeric", "b", False, None, None, typmod, None]


def column(name: str, attnum: int, pg_type: str, kind: str, nullable: bool = True, typmod: int = -1) -> list:
    return [name, attnum, pg_type, nullable, kind, "b", False, None, None, typmod, None]


def with_qty(row: list) -> Table:
    """CURRENT with column qty as the catalog row gives it."""
    return Table("s", "t", (*CURRENT.columns[:2], column_from_row(row)), ("id",), "primary key")


@pytest.mark.parametrize("old, new, before, after", [
    (column("qty", 3, "integer", "int4"), column("qty", 3, "bigint", "int8"), "int", "long"),
    (column("qty", 3, "smallint", "int2"), column("qty", 3, "integer", "int4"), "int", "int"),
    (column("qty", 3, "smallint", "int2"), column("qty", 3, "bigint", "int8"), "int", "long"),
    (column("qty", 3, "real", "float4"), column("qty", 3, "double precision", "float8"), "float", "double"),
    (numeric("qty", 3, 12, 2), numeric("qty", 3, 14, 2),
     {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 2}),
    (column("qty", 3, "character varying(10)", "varchar", typmod=14), column("qty", 3, "text", "text"),
     "string", "string"),
    (column("qty", 3, "character(5)", "bpchar", typmod=9), column("qty", 3, "character varying(9)", "varchar",
                                                                      typmod=13), "string", "string"),
])
def test_widenings_are_compatible(old, new, before, after):
    """A widening goes on as a compatible change: the value field takes the wider Avro type (a
    promotion Avro's schema resolution reads old data with)."""
    current = with_qty(old)
    t = new_table("set1", current, payload(ID, NAME, new), "ALTER TABLE s.t ALTER qty TYPE ...")
    fields = {f["name"]: f for f in avro.value_schema("set1", current)["fields"]}
    assert fields["qty"]["type"] == ["null", before]
    fields = {f["name"]: f for f in avro.value_schema("set1", t)["fields"]}
    assert fields["qty"]["type"] == ["null", after] and t.key_layout is None and t.generation == 1


@pytest.mark.parametrize("old, new, reason", [
    (numeric("qty", 3, 12, 2), numeric("qty", 3, 12, 3), r"numeric\(12,2\) to numeric\(12,3\)"),
    (numeric("qty", 3, 14, 2), numeric("qty", 3, 12, 2), "decimal"),  # narrowing
    (numeric("qty", 3, 12, 2), column("qty", 3, "numeric", "numeric"), "to numeric"),
    (column("qty", 3, "bigint", "int8"), column("qty", 3, "integer", "int4"), "long to int"),
    (column("qty", 3, "double precision", "float8"), column("qty", 3, "real", "float4"), "double to float"),
    (column("qty", 3, "integer", "int4"), column("qty", 3, "double precision", "float8"), "int to double"),
])
def test_other_type_changes_stop(old, new, reason):
    current = with_qty(old)
    with pytest.raises(SchemaChangeError, match=reason) as err:
        new_table("set1", current, payload(ID, NAME, new), "ALTER TABLE s.t ALTER qty TYPE ...")
    assert not err.value.key_change


def test_key_widened_keeps_the_keys_schema_and_bytes():
    """integer -> bigint of the key column: the value field is long, the key keeps its int field
    (same schema, so the same registered id and the same bytes for every key that fits)."""
    big_id = ["id", 1, "bigint", False, "int8", "b", False, None, None, -1, None]
    t = change(payload(big_id, NAME, QTY))
    assert avro.key_schema("set1", t) == avro.key_schema("set1", CURRENT)
    assert avro.value_schema("set1", t)["fields"][0]["type"] == "long"
    assert t.key_layout == (CURRENT.columns[0],) and t.key == ("id",)
    renamed = new_table("set1", t, payload(["ident", 1, "bigint", False, "int8", "b", False, None, None, -1, None],
                                            NAME, QTY), "ALTER TABLE s.t RENAME id TO ident")
    assert renamed.key == ("ident",) and renamed.key_layout == t.key_layout
    assert avro.key_schema("set1", renamed) == avro.key_schema("set1", CURRENT)


def test_key_renamed_keeps_the_keys_field_name():
    t = change(payload(["ident", 1, "integer", False, "int4", "b", False, None, None, -1, None], NAME, QTY))
    assert avro.key_schema("set1", t) == avro.key_schema("set1", CURRENT)
    value = avro.value_schema("set1", t)["fields"][0]
    assert value["name"] == "ident" and value["aliases"] == ["id"]


def test_frozen_key_encodes_the_same_bytes_and_stops_when_a_value_does_not_fit():
    from pgshovel2.codec.avro import AvroWriter
    from pgshovel2.codec.rows import RowEncoder
    from pgshovel2.errors import KeyLayoutError

    t = change(payload(["id", 1, "bigint", False, "int8", "b", False, None, None, -1, None], NAME, QTY))
    key_w = AvroWriter(avro.key_schema("set1", CURRENT), 7)
    before = RowEncoder(CURRENT, True, key_w, AvroWriter(avro.value_schema("set1", CURRENT), 8))
    after = RowEncoder(t, True, key_w, AvroWriter(avro.value_schema("set1", t), 9))
    row = [2**31 - 1, "x", 3]
    assert after.key(after.convert(row)) == before.key(before.convert(row))
    assert after.native is None  # Python checks each key value against the kept layout
    with pytest.raises(KeyLayoutError, match=r"key column \"id\"") as err:
        after.key(after.convert([2**31, "x", 3]))
    assert (err.value.table, err.value.column, err.value.value) == ('"s"."t"', "id", 2**31)
    json_after = RowEncoder(new_table("set1", CURRENT, payload(
        ["ident", 1, "bigint", False, "int8", "b", False, None, None, -1, None], NAME, QTY), "rename"), False)
    assert json_after.key(json_after.convert([2**40, "x", 3])) == b'{"id":1099511627776}'


def test_frozen_numeric_key_checks_its_precision():
    from pgshovel2.codec.avro import AvroWriter
    from pgshovel2.codec.rows import RowEncoder
    from pgshovel2.errors import KeyLayoutError

    cur = Table("s", "t", (Column("k", 1, "numeric(4,1)", "numeric", False, False, 4, 1),), ("k",), "primary key")
    t = new_table("set1", cur, payload(numeric("k", 1, 6, 1, False), key=(1,)), "ALTER k TYPE numeric(6,1)")
    enc = RowEncoder(t, True, AvroWriter(avro.key_schema("set1", cur), 1), AvroWriter(avro.value_schema("set1", t), 2))
    assert enc.key(enc.convert(["999.9"])) == b"\x00\x00\x00\x00\x01" + bytes([4]) + (9999).to_bytes(2, "big")
    with pytest.raises(KeyLayoutError):
        enc.key(enc.convert(["1000.0"]))


@pytest.mark.parametrize("p, reason, key_change", [
    (payload(NAME, QTY, key=()), r"key column\(s\) 'id' dropped", True),
    (payload(["id", 1, "text", False, "text", "b", False, None, None, -1, None], NAME, QTY), "key column 'id'", True),
    ({"schema": "s", "name": "t", "dropped": True}, "the table was dropped", False),
    (payload(ID, NAME, QTY, column("n", 4, "integer", "int4", nullable=False)), "NOT NULL column 'n'", False),
])
def test_incompatible_changes_stop(p, reason, key_change):
    with pytest.raises(SchemaChangeError, match=reason) as err:
        change(p)
    assert err.value.key_change == key_change
    assert ("--new-topic' continues it" in str(err.value)) == key_change


def test_accepted_schema_change_takes_the_new_type_but_never_a_key_change():
    t = new_table("set1", CURRENT, payload(ID, NAME, column("qty", 3, "text", "text")), "ALTER qty TYPE text",
                  accept="schema")
    assert t.columns[2].pg_type == "text" and t.generation == 1
    assert avro.value_schema("set1", t)["fields"][2]["type"] == ["null", "string"]
    with pytest.raises(SchemaChangeError) as err:
        new_table("set1", CURRENT, payload(column("id", 1, "text", "text", False), NAME, QTY), "ALTER id TYPE text",
                  accept="schema")
    assert err.value.key_change


def test_accepted_new_topic_starts_a_generation_with_fresh_schemas():
    t = new_table("set1", CURRENT, payload(column("id", 1, "text", "text", False), NAME, QTY), "ALTER id TYPE text",
                  accept="new-topic")
    assert t.generation == 2 and t.key_layout is None and t.key == ("id",)
    assert avro.key_schema("set1", t)["fields"][0]["type"] == "string"
    frozen = change(payload(["id", 1, "bigint", False, "int8", "b", False, None, None, -1, None], NAME, QTY))
    g2 = new_table("set1", frozen, payload(["id", 1, "bigint", False, "int8", "b", False, None, None, -1, None], NAME,
                                            QTY), "(key value too wide)", accept="new-topic")
    assert g2.key_layout is None and avro.key_schema("set1", g2)["fields"][0]["type"] == "long"
    rekeyed = new_table("set1", CURRENT, payload(NAME, QTY, key=()), "ALTER TABLE s.t DROP id", accept="new-topic",
                        new_key=("name",))
    assert rekeyed.key == ("name",) and rekeyed.generation == 2


def test_renamed_table_keeps_its_identity_and_records_where_it_is():
    t = change(payload(ID, NAME, QTY) | {"schema": "s2", "name": "t2"})
    assert (t.schema, t.name, t.renamed) == ("s", "t", ("s2", "t2"))
    assert t.qualified == '"s"."t"' and t.sql_name == '"s2"."t2"'
    assert avro.value_schema("set1", t) == avro.value_schema("set1", CURRENT)
    assert avro.key_schema("set1", t) == avro.key_schema("set1", CURRENT)
    back = new_table("set1", t, payload(ID, NAME, QTY), "ALTER TABLE s2.t2 RENAME TO t; SET SCHEMA s")
    assert back == CURRENT and back.renamed is None
    assert Table.from_dict(t.to_dict()) == t
