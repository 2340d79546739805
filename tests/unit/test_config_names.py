"""Table names in a set config (``name: schema.table``, quoted parts) and every unknown field
reported at once (pgshovel2.config, pgshovel2.configmodel)."""

import pytest

from pgshovel2.config import parse_config
from pgshovel2.errors import ConfigError, ConfigProblemsError

DB = {"database": {"dsn": "dbname=x"}}


def tables_of(entries):
    return [(t.schema, t.name) for t in parse_config({**DB, "tables": entries}, "f.yaml").tables]


def test_schema_dot_table_in_name():
    assert tables_of(["sales.orders", {"name": "public.customers", "columns": ["id"]}, "plain"]) == [
        ("sales", "orders"), ("public", "customers"), ("public", "plain")]


def test_quoted_parts_keep_dots_and_quotes():
    assert tables_of(['"my.table"', 'sch."a.b"', '"S p"."T""q"']) == [
        ("public", "my.table"), ("sch", "a.b"), ("S p", 'T"q')]


def test_schema_field_still_takes_name_as_it_is():
    assert tables_of([{"schema": "s", "name": "x.y"}, {"schema": "s", "name": "z"}]) == [("s", "x.y"), ("s", "z")]


def test_same_table_written_two_ways_is_a_duplicate():
    with pytest.raises(ConfigError) as err:
        tables_of(["public.t", {"name": "t"}])
    assert err.value.field == "tables[1]" and "duplicate of tables[0]" in str(err.value)


@pytest.mark.parametrize("name, problem", [("a.b.c", "more than schema.table"), ('"open', "never closes"),
                                           ("a..b", "empty part"), ('a"b', "double quote inside"),
                                           ('"a"b', "expected '.'")])
def test_bad_names_are_named(name, problem):
    with pytest.raises(ConfigError) as err:
        tables_of([{"name": name}])
    assert err.value.field == "tables[0].name" and problem in str(err.value)


def test_every_unknown_field_reported_at_once():
    data = {**DB, "bakend": "trigger", "topics": {"partitons": 3}, "envelope": "debezium",
            "debezium": {"schema": True}, "database": {"dsn": "dbname=x", "passwd": "x"},
            "tables": [{"name": "t", "colums": ["a"]}, "u", {"name": "v", "kee": ["a"]}]}
    with pytest.raises(ConfigProblemsError) as err:
        parse_config(data, "f.yaml")
    fields = [e.field for e in err.value.errors]
    assert sorted(fields) == sorted(["bakend", "topics.partitons", "debezium.schema", "database.passwd",
                                     "tables[0].colums", "tables[2].kee"])
    text = str(err.value)
    assert text.startswith("f.yaml: 6 problems:")
    for f in fields:
        assert f"f.yaml: {f}: unknown field; allowed: " in text


def test_one_unknown_field_reads_as_before():
    with pytest.raises(ConfigError) as err:
        parse_config({**DB, "tables": ["t"], "oversized": {"polcy": "fail"}}, "f.yaml")
    assert not isinstance(err.value, ConfigProblemsError)
    assert str(err.value).startswith("f.yaml: oversized.polcy: unknown field; allowed: columns, policy")
