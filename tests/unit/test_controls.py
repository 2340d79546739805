"""Column controls (#71): the config's forms and refusals, the rows and tables the codec makes of
them, and an encoder's output with them (no value as captured left in the bytes)."""

import hashlib
import json
from dataclasses import replace

import pytest

from pgshovel2 import controlsconf
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.controls import controlled
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.config import SetConfig, parse_config
from pgshovel2.controlsconf import ColumnControl
from pgshovel2.errors import ConfigError
from pgshovel2.secretref import SecretReferenceError

DB = {"dsn": "dbname=x"}
CONTROLS = {"password_hash": "exclude", "ssn": {"mask": 4}, "email": {"hash": "env:PII_SALT"}, "bio": {"truncate": 5}}
COLS = (Column("id", 1, "integer", "int4", False, False), Column("email", 2, "text", "text", False, True),
        Column("ssn", 3, "character varying(11)", "varchar", False, True),
        Column("bio", 4, "text", "text", False, True), Column("age", 5, "integer", "int4", False, True))
TABLE = Table("app", "users", COLS, ("id",), "primary key")


def _config(controls, **table) -> SetConfig:
    return parse_config({"database": DB, "tables": [{"name": "app.users", "controls": controls, **table}]}, "f.yaml")


def test_every_form_parses_and_survives_the_stored_record():
    cfg = _config(CONTROLS)
    assert cfg.tables[0].controls == (ColumnControl("password_hash", "exclude"), ColumnControl("ssn", "mask", 4),
                                      ColumnControl("email", "hash", salt="env:PII_SALT"),
                                      ColumnControl("bio", "truncate", 5))
    assert SetConfig.from_dict(cfg.to_dict()) == cfg
    assert not cfg.tables[0].all_columns  # a column excluded: columns added later do not join by themselves
    old = cfg.to_dict()
    del old["tables"][0]["controls"]  # a record from before controls existed
    assert SetConfig.from_dict(old).tables[0].controls == ()


@pytest.mark.parametrize("controls, field", [
    ({"ssn": {"mask": 0}}, "tables[0].controls.ssn.mask"),
    ({"ssn": {"mask": True}}, "tables[0].controls.ssn.mask"),
    ({"bio": {"truncate": "5"}}, "tables[0].controls.bio.truncate"),
    ({"ssn": {"mask": 4, "truncate": 2}}, "tables[0].controls.ssn"),
    ({"ssn": "redact"}, "tables[0].controls.ssn"),
    ({"email": {"hash": None}}, "tables[0].controls.email.hash"),
    ([], "tables[0].controls"),
])
def test_bad_controls_are_named(controls, field):
    with pytest.raises(ConfigError) as err:
        _config(controls)
    assert err.value.field == field


def test_a_salt_written_in_clear_is_refused_and_never_shown():
    with pytest.raises(ConfigError) as err:
        _config({"email": {"hash": "s3cr3t-salt"}})
    assert err.value.field == "tables[0].controls.email.hash" and "s3cr3t" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        _config({"email": {"hash": "s3cr3t-salt", "mask": 2}})
    assert "s3cr3t" not in str(err.value)


def test_exclude_with_a_columns_list_is_refused():
    with pytest.raises(ConfigError) as err:
        _config({"bio": "exclude"}, columns=["id", "email"])
    assert err.value.field == "tables[0].controls"


def _controls(environ=None):
    configured = _config(CONTROLS).tables[0].controls
    return controlled(TABLE, configured, controlsconf.salts(configured, TABLE.qualified,
                                                            environ or {"PII_SALT": "pepper"}))


def test_rows_are_masked_hashed_and_cut_and_null_stays_null():
    controls = _controls()
    row = [7, "ann@example.com", "123-45-6789", "a long biography", 41]
    assert controls.apply(row) == [7, hashlib.sha256(b"pepperann@example.com").hexdigest(), "****", "a lon", 41]
    assert row[1] == "ann@example.com"  # the row given is not changed
    assert controls.apply([8, None, None, None, None]) == [8, None, None, None, None]
    assert controls.apply([9, "x", "1", "abc", 1])[3] == "abc"  # shorter than the cut


def test_equal_values_hash_equal_and_salts_differ():
    one, other = _controls(), _controls({"PII_SALT": "other"})
    assert one.apply([1, "a@b", None, None, None])[1] == one.apply([2, "a@b", None, None, None])[1]
    assert one.apply([1, "a@b", None, None, None])[1] != other.apply([1, "a@b", None, None, None])[1]


def test_a_hashed_number_hashes_its_text():
    configured = (ColumnControl("age", "hash", salt="env:S"),)
    controls = controlled(TABLE, configured, controlsconf.salts(configured, "t", {"S": "s"}))
    assert controls.apply([1, None, None, None, 41])[4] == hashlib.sha256(b"s41").hexdigest()
    assert controls.table.columns[4].kind == "text"  # the schema says string


def test_masked_and_hashed_columns_become_text_in_the_table():
    table = _controls().table
    assert [(c.name, c.pg_type) for c in table.columns] == [
        ("id", "integer"), ("email", "text"), ("ssn", "text"), ("bio", "text"), ("age", "integer")]
    assert (table.schema, table.name, table.key) == (TABLE.schema, TABLE.name, TABLE.key)


def test_an_unreadable_salt_names_column_and_reference_only():
    configured = _config(CONTROLS).tables[0].controls
    with pytest.raises(SecretReferenceError) as err:
        controlsconf.salts(configured, TABLE.qualified, {})
    assert "env:PII_SALT" in str(err.value) and "email" in str(err.value)


def test_no_control_that_changes_a_value_is_no_controls():
    assert controlled(TABLE, (ColumnControl("bio", "exclude"),), {}) is None
    assert controlled(TABLE, (), {}) is None


@pytest.mark.parametrize("use_avro", [False, True])
def test_an_encoder_with_controls_writes_no_value_as_captured(use_avro):
    controls = _controls()
    table = controls.table
    writer = None
    if use_avro:
        schema = avro.value_schema("s", table)
        assert {f["name"]: f["type"] for f in schema["fields"]}["ssn"] == ["null", "string"]
        writer = avro.AvroWriter(schema, 1)
    encoder = RowEncoder(table, use_avro, None, writer, controls)
    assert encoder.native is None  # the native codec would read the captured values
    row = json.dumps([7, "ann@example.com", "123-45-6789", "a long biography", 41])
    value = encoder.value(encoder.convert(json.loads(row)))
    for raw in (b"ann@example.com", b"123-45-6789", b"biography"):
        assert raw not in value
    assert b"****" in value


def test_upgrade_plan_names_each_control_change_without_a_salt():
    from pgshovel2.ops.setdiff import control_changes

    before = _config({"ssn": {"mask": 4}, "email": {"hash": "env:PII_SALT"}})
    after = _config({"ssn": {"mask": 6}, "bio": {"truncate": 5}, "email": {"hash": "env:PII_SALT"}})
    tags = {("app", "users"): TABLE.qualified}
    assert control_changes(before, after, tags) == {
        TABLE.qualified: ["bio: none -> truncate 5", "ssn: mask 4 -> mask 6"]}
    assert control_changes(after, after, tags) == {}


def test_a_readable_key_shows_a_hashed_key_hashed():
    from pgshovel2.relay.emit.oversized import readable_key

    configured = (ColumnControl("id", "hash", salt="env:S"),)
    controls = controlled(TABLE, configured, controlsconf.salts(configured, "t", {"S": "s"}))
    text = readable_key(TABLE, [12345, None, None, None, None], controls)
    assert "12345" not in text and hashlib.sha256(b"s12345").hexdigest()[:20] in text
    assert "12345" in readable_key(TABLE, [12345, None, None, None, None])


def test_a_hashed_date_hashes_its_json_text_not_its_capture_form():
    born = Column("born", 6, "date", "date", False, True)
    table = Table("app", "users", (*COLS, born), ("id",), "primary key")
    configured = (ColumnControl("born", "hash", salt="env:S"),)
    controls = controlled(table, configured, controlsconf.salts(configured, "t", {"S": "s"}))
    days_2000 = -5419  # 1985-03-01 as the capture forms have it (days since 2000-01-01)
    assert controls.apply([1, None, None, None, None, days_2000])[5] == hashlib.sha256(b"s1985-03-01").hexdigest()


def test_a_control_follows_its_column_through_a_rename():
    renamed = tuple(replace(c, name="social", aliases=("ssn",)) if c.name == "ssn" else c for c in COLS)
    table = Table("app", "users", renamed, ("id",), "primary key")
    controls = controlled(table, (ColumnControl("ssn", "mask", 4),), {})
    assert controls.apply([1, None, "123-45-6789", None, None])[2] == "****"
    assert controls.table.columns[2].name == "social" and controls.table.columns[2].kind == "text"
