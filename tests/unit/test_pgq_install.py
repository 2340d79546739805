"""PgQ's PL-only build without its role statements, and the pgq kind in set records."""

import json
from pathlib import Path

import pytest

from pgshovel2.backends import pgq_install
from pgshovel2.config import parse_config
from pgshovel2.errors import CaptureError
from pgshovel2.setrecord import SetRecord

PL_ONLY = Path("/usr/share/postgresql/15/contrib")  # postgresql-15-pgq3, installed with the stack


@pytest.mark.parametrize("name", ["pgq_pl_only.sql", "pgq_pl_only.upgrade.sql"])
def test_role_statements_are_left_out(name):
    text = (PL_ONLY / name).read_text()
    out = pgq_install.without_roles(text, name)
    for word in ("create role", "pgq_reader", "pgq_writer", "pgq_admin"):
        assert word not in out.lower()
    assert out.count("create or replace function") == text.count("create or replace function")
    assert "TO public;" in out  # the grants to PUBLIC stay


def test_unexpected_layout_is_refused_naming_the_file():
    with pytest.raises(CaptureError, match="other.sql: cannot leave out PgQ's role statements"):
        pgq_install.without_roles("create role pgq_reader;", "other.sql")


def test_locate_names_the_missing_file(tmp_path):
    with pytest.raises(CaptureError, match=str(tmp_path / "none.sql")):
        pgq_install.locate(str(tmp_path / "none.sql"))


def test_locate_reads_the_version_next_to_the_file():
    source = pgq_install.locate(str(PL_ONLY / "pgq_pl_only.sql"))
    assert source.version == "3.5" and source.upgrade == PL_ONLY / "pgq_pl_only.upgrade.sql"


def test_records_keep_the_pgq_kind_and_old_ones_read_as_extension():
    config = parse_config({"database": {"dsn": "dbname=x"}, "tables": ["t"], "pgq": "pl"}, "f.yaml")
    record = SetRecord.new("c", "s", config, ())
    pl = record.replace(capture=record.capture.__class__(record.capture.queue, record.capture.trigger, pgq="pl"))
    assert SetRecord.from_node(pl.to_node()).capture.pgq == "pl"
    old = json.loads(record.to_node())
    del old["pgq"]
    assert SetRecord.from_dict(old).capture.pgq == "extension"
