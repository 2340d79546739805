"""ZooKeeper security settings (pgshovel2.zkauth): forms, references, ACLs, the settings file."""

import pytest
from kazoo.security import make_digest_acl

from pgshovel2.errors import ConfigError
from pgshovel2.zkauth import ZooKeeperAuth, acl_text

SECRET = "zk-hunter2"


def test_sasl_and_digest_give_the_principal_all_rights(monkeypatch):
    monkeypatch.setenv("ZK_PW", SECRET)
    sasl = ZooKeeperAuth.build({"auth": "sasl:admin:env:ZK_PW", "acl": "sasl:relay:crw;x509:CN=a,O=b:r"}, "t")
    assert [acl_text(a) for a in sasl.acl()] == ["sasl:admin:cdrwa", "sasl:relay:crw", "x509:CN=a,O=b:r"]
    options = sasl.client_options()
    assert options["sasl_options"] == {"mechanism": "DIGEST-MD5", "username": "admin", "password": SECRET}
    assert options["default_acl"] == sasl.acl() and "use_ssl" not in options
    digest = ZooKeeperAuth.build({"auth": "digest:admin:env:ZK_PW"}, "t")
    assert digest.acl() == [make_digest_acl("admin", SECRET, all=True)]
    assert digest.client_options()["auth_data"] == [("digest", f"admin:{SECRET}")]
    assert SECRET not in repr(digest) and SECRET not in digest.describe()
    assert ZooKeeperAuth().client_options() == {} and not ZooKeeperAuth().secured


@pytest.mark.parametrize("settings", [
    {"auth": f"sasl:admin:{SECRET}"},  # the password itself
    {"auth": "kerberos:admin:env:X"},
    {"auth": "sasl::env:X"},
    {"acl": "world:anyone:r"},
    {"acl": "sasl:relay:rwx"},
    {"key_password": SECRET, "cert": "c.pem", "key": "k.pem"},
    {"cert": "c.pem"},
])
def test_bad_settings_are_refused_without_showing_a_secret(settings):
    with pytest.raises(ConfigError) as err:
        ZooKeeperAuth.build(settings, "--zookeeper-* options")
    assert SECRET not in str(err.value) and "--zookeeper-* options" in str(err.value)


def test_tls_and_the_settings_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KEY_PW", "k")
    path = tmp_path / "zk.yaml"
    path.write_text("auth: sasl:admin:env:ZK_PW\nca: /ca.pem\ncert: /c.pem\nkey: /k.pem\nkey_password: env:KEY_PW\n"
                    "acl: [sasl:relay:cdrwa]\n")
    auth = ZooKeeperAuth.load(str(path), {"auth": "sasl:other:env:ZK_PW", "ca": None})
    assert (auth.user, auth.ca, auth.tls, auth.acl_entries) == ("other", "/ca.pem", True, ("sasl:relay:cdrwa",))
    monkeypatch.setenv("ZK_PW", SECRET)
    options = auth.client_options()
    assert (options["use_ssl"], options["check_hostname"], options["ca"], options["certfile"], options["keyfile"],
            options["keyfile_password"]) == (True, True, "/ca.pem", "/c.pem", "/k.pem", "k")
    path.write_text("auth: sasl:admin:env:ZK_PW\nhosts: x\n")
    with pytest.raises(ConfigError, match="must be a mapping of"):
        ZooKeeperAuth.load(str(path), {})
