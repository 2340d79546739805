"""docs/config.rst is what scripts/config_doc.py makes of the config model the parser uses
(pgshovel2.configmodel): a field added, renamed or re-described without regenerating the page fails
here, and so does a field the parser knows that the model (so the page) lacks."""

import pytest
import yaml

from pgshovel2.config import parse_config
from pgshovel2.configmodel import FIELDS
from pgshovel2.errors import ConfigError
from scripts.config_doc import OUT, reference


def test_config_page_is_generated_from_the_model():
    assert OUT.read_text(encoding="utf-8") == reference(), "run: python scripts/config_doc.py"


def test_every_field_is_on_the_page_with_type_default_and_example():
    text = OUT.read_text(encoding="utf-8")
    for path in ("database.dsn", "database.relay_dsn", "backend", "capture", "pgq", "decoder", "publication.existing",
                 "encoding", "envelope", "debezium.schemas", "debezium.binary_handling_mode", "topic_prefix",
                 "topics.partitions", "oversized.policy", "oversized.columns", "tables[].name", "tables[].schema",
                 "tables[].columns", "tables[].key", "tables[].allow_unkeyed"):
        section = text.split(f"``{path}``\n", 1)[1].split("\n``", 1)[0]
        assert "Type: " in section and "Default: " in section and ".. code-block:: yaml" in section, path


def test_the_model_is_what_the_parser_accepts():
    """A field the model does not have is refused at each place of the model, and each literal
    default the page shows is the value the parser gives a config without the field."""
    base = {"database": {"dsn": "dbname=x"}, "tables": ["t"]}
    for top in FIELDS:
        if top.fields:
            value = [{"name": "t", "zz_not_a_field": 1}] if top.kind == "list" else {"zz_not_a_field": 1}
            with pytest.raises(ConfigError) as err:
                parse_config({**base, top.name: value}, "f.yaml")
            assert f"{top.name}{'[0]' if top.kind == 'list' else ''}.zz_not_a_field: unknown field" in str(err.value)
    cfg = parse_config(base, "f.yaml")
    debezium = parse_config({**base, "envelope": "debezium"}, "f.yaml").debezium
    parsed = {"": cfg, "topics": cfg.topics, "oversized": cfg.oversized, "debezium": debezium,
              "tables": cfg.tables[0], "database": None, "publication": None,
              "heartbeat": None}
    for top in FIELDS:
        for fld, owner in [(top, "")] + [(f, top.name) for f in top.fields]:
            if fld.default is None or fld.default.startswith("(") or parsed[owner] is None:
                continue
            got = getattr(parsed[owner], fld.name)
            assert yaml.safe_dump(_plain(got)).strip() == yaml.safe_dump(yaml.safe_load(fld.default)).strip(), \
                (owner, fld.name, got, fld.default)


def _plain(value):
    return list(value) if isinstance(value, tuple) else value
