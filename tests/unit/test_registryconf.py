"""Schema registry settings (pgshovel2.registryconf) and the command-line rules for secrets
(pgshovel2.cli.clientopts): credentials in a URL are taken out and never shown, user info comes
from a reference (or its variable), a literal secret on the command line is refused."""

import pytest
from click.testing import CliRunner

from pgshovel2 import registryconf
from pgshovel2.cli.admin import main as pgshovel
from pgshovel2.registryconf import RegistrySettings, RegistrySettingsError


def test_user_info_in_the_url_is_taken_out():
    settings = RegistrySettings.load("https://us%3Aer:p%40ss@reg.example:8443/apis/ccompat/v7")
    assert settings.url == str(settings) == "https://reg.example:8443/apis/ccompat/v7"
    assert settings.user_info == "us:er:p@ss" and settings.user_info_origin == "the schema registry URL"
    assert "p@ss" not in repr(settings) and "p%40ss" not in repr(settings)
    assert settings.client_config() == {"url": "https://reg.example:8443/apis/ccompat/v7",
                                        "basic.auth.user.info": "us:er:p@ss"}
    several = RegistrySettings.load("http://a:1/x, https://u:pw@b:2/x")
    assert several.url == "http://a:1/x,https://b:2/x" and several.user_info == "u:pw"
    assert registryconf.redact_url("https://u:pw@b:2/x,http://c/y") == "https://***@b:2/x,http://c/y"


def test_user_info_from_references_and_variables(tmp_path):
    path = tmp_path / "userinfo"
    path.write_text("svc:from-file\n")
    assert RegistrySettings.load("http://r", f"file:{path}").user_info == "svc:from-file"
    env = {"PGSHOVEL_SCHEMA_REGISTRY_USER_INFO": "env:REG", "REG": "svc:from-env",
           "PGSHOVEL_SCHEMA_REGISTRY_CA": str(path)}
    settings = registryconf.settings("http://r", env)
    assert settings.user_info == "svc:from-env" and settings.ca == str(path)
    assert settings.user_info_origin == "variable PGSHOVEL_SCHEMA_REGISTRY_USER_INFO, from env:REG"
    assert registryconf.settings(None) is None and registryconf.settings(settings) is settings


@pytest.mark.parametrize(("args", "message"), [
    (("https://u:secret@r", "env:X"), "carries user info and .* is set too"),
    (("http://r", "no-colon-secret"), r"must be USER:PASSWORD"),
    (("ftp://r",), "expected http"),
    (("https://u:secret@r:99999/",), "Port out of range"),
    (("http://r", None, None, "/etc/hostname"), "needs its key"),
    (("http://r", None, "/no/such/ca.pem"), "CA bundle /no/such/ca.pem: not a readable file"),
])
def test_refused_settings_never_show_a_secret(args, message):
    with pytest.raises(RegistrySettingsError, match=message) as info:
        RegistrySettings.load(*args, environ={"X": "u:p"})
    assert "secret" not in str(info.value)


def test_failure_messages():
    class RefusedError(Exception):
        def __init__(self, status, text):
            super().__init__(text)
            self.http_status_code, self.error_message = status, text

    with_user = RegistrySettings.load("http://u:hunter2@r")
    assert "wants credentials (HTTP 401): set --schema-registry-user-info" in registryconf.failure(
        RefusedError(401, "Unauthorized"), RegistrySettings.load("http://r"))
    refused = registryconf.failure(RefusedError(401, "bad hunter2"), with_user)
    assert "refused the credentials (HTTP 401; user info from the schema registry URL)" in refused
    html = "<html><head><title>400 No required SSL certificate was sent</title></head></html>"
    assert registryconf.failure(RefusedError(400, html), with_user) == (
        "the registry wants a client certificate (HTTP 400 No required SSL certificate was sent): set "
        "--schema-registry-cert and --schema-registry-key")
    assert registryconf.failure(Exception("boom hunter2"), with_user) == "boom ***"


def test_command_line_secrets_must_be_references():
    runner = CliRunner()
    literal = runner.invoke(pgshovel, ["tail", "s", "--schema-registry", "http://r",
                                       "--schema-registry-user-info", "user:literal-secret"])
    assert literal.exit_code == 2 and "must be a reference, env:NAME or file:PATH" in literal.output
    assert "literal-secret" not in literal.output
    no_url = runner.invoke(pgshovel, ["tail", "s", "--schema-registry-ca", "/etc/hostname"])
    assert no_url.exit_code == 2 and "need --schema-registry URL" in no_url.output
    bad_kafka = runner.invoke(pgshovel, ["tail", "s"], env={"PGSHOVEL_KAFKA_ISOLATION_LEVEL": "read_uncommitted"})
    assert bad_kafka.exit_code == 2 and "isolation.level (variable PGSHOVEL_KAFKA_ISOLATION_LEVEL)" in bad_kafka.output
