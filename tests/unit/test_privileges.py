"""The grants printed for a set config, per path and role (pgshovel2.backends.grants)."""

from pgshovel2.backends.grants import grants_sql
from pgshovel2.config import parse_config


def _config(**extra):
    return parse_config({"database": {"dsn": "host=h dbname=app user=cdc", "relay_dsn": "user=cdc_relay"},
                         "tables": ["t", {"schema": "S", "name": "u"}], **extra}, "f.yaml")


def _statements(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("--")]


def test_trigger_c_grants_both_roles_and_no_ownership():
    text = grants_sql(_config(capture="c"))
    assert 'GRANT USAGE ON SCHEMA "S" TO "cdc";' in text
    assert 'GRANT SELECT, TRIGGER ON TABLE "public"."t" TO "cdc";' in text
    assert 'GRANT EXECUTE ON FUNCTION pgshovel2.drop_trigger(regclass, name) TO "cdc";' in text
    assert 'GRANT pgq_admin TO "cdc";' in text and 'GRANT USAGE ON SCHEMA pgshovel2 TO "cdc_relay";' in text
    assert 'GRANT SELECT ON TABLE "S"."u" TO "cdc_relay";' in text
    relay_pgq = next(line for line in _statements(text) if line.startswith("GRANT EXECUTE ON FUNCTION pgq."))
    assert relay_pgq.endswith('TO "cdc_relay";') and "pgq.next_batch_info(text, text)" in relay_pgq
    assert "pgq.finish_batch(bigint)" in relay_pgq and "pgq.ticker(text)" in relay_pgq
    assert not any("OWNER TO" in line or "CREATE ON DATABASE" in line for line in _statements(text))
    assert "pgq_writer" not in "".join(_statements(text)) and "need no grant for pgshovel2" in text


def test_plpgsql_capture_names_the_owner_need_and_transfers_only_when_asked():
    text = grants_sql(_config(capture="plpgsql"))
    assert 'CREATE SCHEMA IF NOT EXISTS pgshovel2_pl AUTHORIZATION "cdc";' in text
    assert not any("OWNER TO" in line for line in _statements(text))
    owned = grants_sql(_config(capture="plpgsql"), transfer_ownership=True)
    assert 'ALTER TABLE "S"."u" OWNER TO "cdc";' in _statements(owned)


def test_logical_grants_replication_to_both_roles():
    text = grants_sql(_config(backend="logical"))
    assert 'ALTER ROLE "cdc" REPLICATION;' in text and 'ALTER ROLE "cdc_relay" REPLICATION;' in text
    assert 'GRANT SELECT ON TABLE "public"."t" TO "cdc_relay";' in text and "TRIGGER" not in text
    assert 'GRANT UPDATE ON TABLE "S"."u" TO "cdc";' in text  # set upgrade's LOCK TABLE
    assert 'GRANT UPDATE ON TABLE "S"."u" TO "cdc_relay";' not in text
    assert not any("OWNER TO" in line for line in _statements(text))
    (messages,) = [line for line in _statements(text) if "pg_logical_emit_message" in line]  # markers: no forgery
    assert "FROM PUBLIC" in messages and 'TO "cdc", "cdc_relay"' in messages


def test_trigger_relay_role_gets_the_partition_watch_note():
    text = grants_sql(_config(capture="c"))
    assert 'needs TRIGGER on them (ALTER DEFAULT PRIVILEGES FOR ROLE <their owner>' in text
    assert "pg_logical_emit_message" not in text


def test_pgoutput_with_an_existing_publication_prints_it_and_no_create():
    text = grants_sql(_config(backend="logical", decoder="pgoutput", publication={"existing": "cdc_pub"}))
    assert any(line.startswith('CREATE PUBLICATION "cdc_pub" FOR TABLE "public"."t", "S"."u"')
               for line in _statements(text))
    assert not any("CREATE ON DATABASE" in line or "OWNER TO" in line for line in _statements(text))


def test_one_dsn_is_one_role():
    cfg = parse_config({"database": {"dsn": "dbname=app user=cdc"}, "tables": ["t"]}, "f.yaml")
    text = grants_sql(cfg)
    assert "the relay role: the admin role" in text and "cdc_relay" not in text
