"""database.relay_dsn: the relay role's libpq keywords over database.dsn (SetRecord.relay_dsn),
stored with the set (no literal secret), and publication.existing's place in the record."""

import pytest
from psycopg2.extensions import parse_dsn

from pgshovel2.config import parse_config
from pgshovel2.errors import ConfigError
from pgshovel2.setrecord import PLUGIN, SetRecord

DSN = "host=db port=6432 dbname=shop user=admin password=env:ADMIN_PW sslmode=verify-full sslrootcert=/ca.pem"


def _record(database: dict, **extra) -> SetRecord:
    cfg = parse_config({"database": database, "tables": ["t"], **extra}, "f.yaml")
    return SetRecord.from_node(SetRecord.new("c", "s", cfg, (), plugin=cfg.decoder or PLUGIN).to_node())


def test_relay_dsn_lays_its_keywords_over_the_dsn_without_the_admins_password():
    relay = parse_dsn(_record({"dsn": DSN, "relay_dsn": "user=relay sslcert=/r.pem sslkey=/r.key"}).relay_dsn)
    assert relay["user"] == "relay" and "password" not in relay  # its own: .pgpass, PGPASSWORD, a service file
    assert (relay["host"], relay["port"], relay["sslmode"], relay["sslcert"]) == ("db", "6432", "verify-full", "/r.pem")
    own = parse_dsn(_record({"dsn": DSN, "relay_dsn": "user=relay password=file:/run/relay.pw"}).relay_dsn)
    assert own["password"] == "file:/run/relay.pw"
    same = parse_dsn(_record({"dsn": DSN, "relay_dsn": "application_name=r"}).relay_dsn)
    assert same["user"] == "admin" and same["password"] == "env:ADMIN_PW"  # the same role: its password


def test_one_dsn_serves_both_roles():
    assert _record({"dsn": DSN}).relay_dsn == DSN


def test_a_relay_dsn_holding_a_password_itself_is_refused_unshown():
    with pytest.raises(ConfigError, match="database.relay_dsn") as err:
        _record({"dsn": DSN, "relay_dsn": "user=relay password=hunter2"})
    assert "hunter2" not in str(err.value)


def test_existing_publication_is_read_not_owned():
    record = _record({"dsn": DSN}, backend="logical", decoder="pgoutput", publication={"existing": "shop_pub"})
    assert record.publication == "shop_pub" and not record.owns_publication
    own = _record({"dsn": DSN}, backend="logical", decoder="pgoutput")
    assert own.publication == own.capture.slot and own.owns_publication
    with pytest.raises(ConfigError, match="pgoutput only"):
        _record({"dsn": DSN}, publication={"existing": "shop_pub"})
