"""Config validation: every error names file, field and value."""

import pytest

from pgshovel2.config import SetConfig, load_config, parse_config, validate_set_name
from pgshovel2.errors import ConfigError

GOOD = {"database": {"dsn": "dbname=x"}, "tables": ["t1", {"schema": "S p", "name": "T.2",
                                                           "columns": ["a"], "key": ["a"]}]}


def test_parses_tables_with_defaults():
    cfg = parse_config(GOOD, "f.yaml")
    assert [(t.schema, t.name) for t in cfg.tables] == [("public", "t1"), ("S p", "T.2")]
    assert cfg.tables[1].columns == ("a",) and cfg.tables[1].key == ("a",)
    assert (cfg.encoding, cfg.backend, cfg.envelope) == ("avro", "trigger", "row")
    assert SetConfig.from_dict(cfg.to_dict()) == cfg


def test_debezium_envelope_accepted():
    cfg = parse_config({**GOOD, "envelope": "debezium"}, "f.yaml")
    assert cfg.envelope == "debezium"
    assert SetConfig.from_dict(cfg.to_dict()) == cfg


def test_pgq_mode_defaults_to_auto_and_old_records_read():
    cfg = parse_config({**GOOD, "pgq": "pl"}, "f.yaml")
    assert cfg.pgq == "pl" and SetConfig.from_dict(cfg.to_dict()) == cfg
    old = {k: v for k, v in parse_config(GOOD, "f.yaml").to_dict().items() if k != "pgq"}
    assert SetConfig.from_dict(old).pgq == "auto"


@pytest.mark.parametrize("patch, field", [
    ({"encoding": "xml"}, "encoding"),
    ({"envelope": "cloudevents"}, "envelope"),
    ({"database": {}}, "database.dsn"),
    ({"tables": []}, "tables"),
    ({"tables": [{"name": ""}]}, "tables[0].name"),
    ({"tables": [{"name": "t", "colums": ["a"]}]}, "tables[0].colums"),
    ({"tables": [{"name": "t", "columns": ["a", "a"]}]}, "tables[0].columns"),
    ({"tables": ["t", "t"]}, "tables[1]"),
    ({"tables": [{"name": "x" * 64}]}, "tables[0].name"),
    ({"topics": {"partitions": 0}}, "topics.partitions"),
    ({"unknown": 1}, "unknown"),
    ({"capture": "rust"}, "capture"),
    ({"capture": "plpgsql", "backend": "logical"}, "capture"),
    ({"pgq": "c"}, "pgq"),
    ({"backend": "logical", "pgq": "pl"}, "pgq"),
])
def test_bad_fields_are_named(patch, field):
    with pytest.raises(ConfigError) as err:
        parse_config({**GOOD, **patch}, "f.yaml")
    assert err.value.field == field
    assert str(err.value).startswith(f"f.yaml: {field}: ")


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("database:\n  dsn: 'x'\ntables: [a, b\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "malformed YAML" in str(err.value)
    assert err.value.field.startswith("line ")


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("/nonexistent/set.yaml")


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a" * 41, "a b"])
def test_bad_set_names(name):
    with pytest.raises(ConfigError):
        validate_set_name(name)


def test_capture_kind_is_kept_and_old_records_read_as_c():
    from pgshovel2.setrecord import SetRecord, TriggerCapture

    cfg = parse_config({**GOOD, "capture": "plpgsql"}, "f.yaml")
    assert cfg.capture == "plpgsql" and SetConfig.from_dict(cfg.to_dict()) == cfg
    record = SetRecord.new("c1", "s", cfg, ())
    record = record.replace(capture=TriggerCapture(record.queue, record.capture.trigger, kind="plpgsql"))
    assert SetRecord.from_node(record.to_node()).capture.kind == "plpgsql"
    old = record.to_dict()
    del old["capture"]
    del old["config"]["capture"]
    assert SetRecord.from_dict(old).capture.kind == "c" and SetRecord.from_dict(old).config.capture is None


def test_debezium_schemas_option():
    cfg = parse_config({**GOOD, "envelope": "debezium", "encoding": "json"}, "f.yaml")
    assert cfg.debezium.schemas is True and cfg.connect
    off = parse_config({**GOOD, "envelope": "debezium", "encoding": "json", "debezium": {"schemas": False}}, "f.yaml")
    assert off.debezium.schemas is False and not off.connect
    assert SetConfig.from_dict(off.to_dict()) == off and SetConfig.from_dict(cfg.to_dict()) == cfg
    assert parse_config({**GOOD, "envelope": "debezium"}, "f.yaml").connect  # Avro: the same switch
    # a set stored before the option existed keeps its topics' schemaless form
    old = {k: v for k, v in cfg.to_dict().items() if k != "debezium"}
    assert SetConfig.from_dict(old).debezium.schemas is False


@pytest.mark.parametrize("patch, field, why", [
    ({"debezium": {"schemas": False}}, "debezium", "envelope: debezium only"),
    ({"envelope": "debezium", "debezium": {"schemas": "no"}}, "debezium.schemas", "true or false"),
    ({"envelope": "debezium", "debezium": {"schema": True}}, "debezium.schema", "unknown field"),
    ({"envelope": "debezium", "debezium": True}, "debezium", "must be a mapping"),
])
def test_debezium_option_errors(patch, field, why):
    with pytest.raises(ConfigError, match=why) as err:
        parse_config({**GOOD, **patch}, "f.yaml")
    assert field in str(err.value) and "f.yaml" in str(err.value)


def test_debezium_skipped_operations():
    base = {**GOOD, "envelope": "debezium", "encoding": "json"}
    assert parse_config(base, "f.yaml").debezium.truncate_events is False  # Debezium's default: skip t
    cfg = parse_config({**base, "debezium": {"skipped_operations": []}}, "f.yaml")
    assert cfg.debezium.truncate_events is True and SetConfig.from_dict(cfg.to_dict()) == cfg
    for bad in (["d"], "t", ["t", "c"]):
        with pytest.raises(ConfigError, match="debezium.skipped_operations.*never skipped"):
            parse_config({**base, "debezium": {"skipped_operations": bad}}, "f.yaml")
    with pytest.raises(ConfigError, match="debezium.skipped_operations.*need JSON"):
        parse_config({**base, "encoding": "avro", "debezium": {"skipped_operations": []}}, "f.yaml")


def test_debezium_value_modes():
    """Debezium's decimal/interval/binary handling modes: its defaults, the others on request (kept in
    the stored record), a bad value named with the choices, refused without the Connect form, and
    records stored before the options read as the defaults."""
    base = {**GOOD, "envelope": "debezium", "encoding": "json"}
    cfg = parse_config(base, "f.yaml").debezium
    assert (cfg.decimal_handling_mode, cfg.interval_handling_mode, cfg.binary_handling_mode) == \
        ("precise", "numeric", "bytes")
    modes = {"decimal_handling_mode": "string", "interval_handling_mode": "string", "binary_handling_mode": "hex"}
    cfg = parse_config({**base, "debezium": modes}, "f.yaml")
    assert SetConfig.from_dict(cfg.to_dict()) == cfg and cfg.debezium.decimal_handling_mode == "string"
    with pytest.raises(ConfigError, match="debezium.decimal_handling_mode.*precise, string, double"):
        parse_config({**base, "debezium": {"decimal_handling_mode": "exact"}}, "f.yaml")
    with pytest.raises(ConfigError, match="debezium.binary_handling_mode.*schemas: true"):
        parse_config({**base, "debezium": {"schemas": False, "binary_handling_mode": "hex"}}, "f.yaml")
    stored = cfg.to_dict()
    for key in modes:
        del stored["debezium"][key]
    assert SetConfig.from_dict(stored).debezium.interval_handling_mode == "numeric"


def test_debezium_unchanged_toast():
    """debezium.unchanged_toast: Debezium's placeholder by default (its default text, or the one
    given), header (null) on request; bad values name the key; a stored record before the option
    keeps header (what its topics hold)."""
    base = {**GOOD, "envelope": "debezium", "encoding": "json"}
    cfg = parse_config(base, "f.yaml")
    assert (cfg.debezium.unchanged_toast, cfg.debezium.placeholder) == ("placeholder", "__debezium_unavailable_value")
    cfg = parse_config({**base, "debezium": {"unavailable_value_placeholder": "N/A"}}, "f.yaml")
    assert cfg.debezium.placeholder == "N/A" and SetConfig.from_dict(cfg.to_dict()) == cfg
    cfg = parse_config({**base, "debezium": {"unchanged_toast": "header"}}, "f.yaml")
    assert cfg.debezium.placeholder is None and SetConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="debezium.unchanged_toast.*placeholder.*or header"):
        parse_config({**base, "debezium": {"unchanged_toast": "null"}}, "f.yaml")
    for bad in ("", 5, None):
        with pytest.raises(ConfigError, match="debezium.unavailable_value_placeholder.*non-empty string"):
            parse_config({**base, "debezium": {"unavailable_value_placeholder": bad}}, "f.yaml")
    with pytest.raises(ConfigError, match="debezium.unavailable_value_placeholder.*placeholder only"):
        parse_config({**base, "debezium": {"unchanged_toast": "header", "unavailable_value_placeholder": "x"}},
                     "f.yaml")
    stored = {**cfg.to_dict(), "debezium": {"schemas": True, "skipped_operations": ["t"]}}
    assert SetConfig.from_dict(stored).debezium.placeholder is None
    assert SetConfig.from_dict({k: v for k, v in stored.items() if k != "debezium"}).debezium.placeholder is None


def test_upgrade_keeps_the_topics_json_form():
    """set upgrade refuses to change a debezium JSON set's form (Connect schema + payload or not); a set
    stored before the option existed is schemaless, a row set is unaffected."""
    from pgshovel2.ops.upgrade import _check_immutable

    new = parse_config({**GOOD, "envelope": "debezium", "encoding": "json"}, "f.yaml")
    old = SetConfig.from_dict({k: v for k, v in new.to_dict().items() if k != "debezium"})
    with pytest.raises(ConfigError, match="debezium.schemas.*stored: False"):
        _check_immutable(old, new, "f.yaml")
    _check_immutable(old, parse_config({**GOOD, "envelope": "debezium", "encoding": "json",
                                        "debezium": {"schemas": False}}, "f.yaml"), "f.yaml")
    row = parse_config({**GOOD, "encoding": "json"}, "f.yaml")
    _check_immutable(SetConfig.from_dict({k: v for k, v in row.to_dict().items() if k != "debezium"}), row, "f.yaml")


def test_debezium_schemas_covers_avro_and_stored_avro_sets_keep_their_form():
    """debezium.schemas is one switch for both encodings: a new Avro debezium set defaults to
    Debezium's Connect schemas; an Avro set stored before the option covered Avro (no
    ``debezium.form``) keeps pgshovel2's own Avro, and set upgrade refuses to switch it."""
    from pgshovel2.ops.upgrade import _check_immutable

    new = parse_config({**GOOD, "envelope": "debezium"}, "f.yaml")
    assert new.encoding == "avro" and new.connect and SetConfig.from_dict(new.to_dict()) == new
    stored = new.to_dict()
    del stored["debezium"]["form"]  # written by a version whose schemas meant JSON only
    old = SetConfig.from_dict(stored)
    assert old.debezium.schemas is False and not old.connect
    with pytest.raises(ConfigError, match="debezium.schemas.*stored: False"):
        _check_immutable(old, new, "f.yaml")
    _check_immutable(old, parse_config({**GOOD, "envelope": "debezium", "debezium": {"schemas": False}}, "f.yaml"),
                     "f.yaml")
    json_set = parse_config({**GOOD, "envelope": "debezium", "encoding": "json"}, "f.yaml").to_dict()
    del json_set["debezium"]["form"]
    assert SetConfig.from_dict(json_set).debezium.schemas is True  # JSON's meaning never changed
