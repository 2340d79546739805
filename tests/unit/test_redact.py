"""One redaction (#67): DSNs, URLs, property maps, free text, log records and Sentry events never
carry a secret; a malformed DSN's error shows no part of its password; secret references."""

import json

import pytest

from pgshovel2 import db, redact, secretref

SECRET = "hunter2x"


@pytest.mark.parametrize("dsn", [
    f"host=h dbname=d password={SECRET}",
    f"host=h password='{SECRET} and more' user=u",
    f"host=h sslpassword={SECRET} sslkey=/k.pem",
    f"postgresql://u:{SECRET}@h:5432/d?sslmode=verify-full",
    f"postgresql://u@h/d?sslpassword={SECRET}",
    f"host=h sslkey='-----BEGIN PRIVATE KEY-----{SECRET}-----END PRIVATE KEY-----'",
])
def test_dsn_masks_every_libpq_secret(dsn):
    assert SECRET not in redact.dsn(dsn)
    assert SECRET not in redact.strip_dsn(dsn)
    assert redact.literal_secrets(dsn)
    assert "h" in redact.dsn(dsn)


def test_references_are_kept_and_are_no_secret():
    dsn = "host=h dbname=d password=env:PGPASS_X sslpassword=file:/etc/key.pw"
    assert redact.dsn(dsn) == dsn
    assert redact.strip_dsn(dsn) == dsn
    assert redact.literal_secrets(dsn) == []
    assert redact.strip_dsn(f"host=h password={SECRET} dbname=d") == "host=h dbname=d"


def test_a_malformed_dsn_is_masked_from_its_first_secret():
    for malformed in (f"host=h password={SECRET} pieces dbname=x", f"host=h password='{SECRET} pieces"):
        shown = redact.dsn(malformed)
        assert SECRET not in shown and "pieces" not in shown and shown.startswith("host=h password=***")


def test_text_masks_pairs_urls_json_and_keys():
    text = (f"cannot connect 'host=h password={SECRET} dbname=d'; registry https://bob:{SECRET}@reg:8081/x; "
            f'{{"sasl.password": "{SECRET}", "ok": 1}} ssl.key.password={SECRET} '
            f"-----BEGIN RSA PRIVATE KEY-----\n{SECRET}\n-----END RSA PRIVATE KEY-----")
    out = redact.text(text)
    assert SECRET not in out
    assert "host=h" in out and "bob:***@reg:8081" in out and '"ok": 1' in out
    assert redact.text("password=env:DB_PW") == "password=env:DB_PW"


def test_properties_mask_secret_looking_keys():
    props = {"bootstrap.servers": "h:9092", "sasl.password": SECRET, "ssl.key.password": SECRET,
             "sasl.jaas.config": f'... password="{SECRET}";', "basic.auth.user.info": f"u:{SECRET}",
             "ssl.keystore.key": SECRET, "sasl.oauthbearer.client.secret": SECRET,
             "schema.registry.url": f"https://u:{SECRET}@r/"}
    out = redact.properties(props)
    assert SECRET not in json.dumps(out)
    assert out["bootstrap.servers"] == "h:9092"


def test_secret_references(tmp_path, monkeypatch):
    monkeypatch.setenv("PGSHOVEL_TEST_PW", SECRET)
    (tmp_path / "pw").write_text(SECRET + "\n")
    assert secretref.required("env:PGSHOVEL_TEST_PW", "x") == SECRET
    assert secretref.required(f"file:{tmp_path / 'pw'}", "x") == SECRET
    for bad in (SECRET, "env:PGSHOVEL_TEST_UNSET", f"file:{tmp_path / 'missing'}"):
        with pytest.raises(secretref.SecretReferenceError) as err:
            secretref.required(bad, "--thing")
        assert SECRET not in str(err.value) and "--thing" in str(err.value)
    dsn = "host=h dbname=d password=env:PGSHOVEL_TEST_PW"
    assert f"password={SECRET}" in db.libpq_dsn(dsn, "set 'x'")
