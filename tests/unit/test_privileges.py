"""The grants printed for a set config, per backend."""

from pgshovel2.backends.privileges import grants_sql
from pgshovel2.config import parse_config


def test_trigger_grants_name_role_database_and_tables():
    cfg = parse_config({"database": {"dsn": "host=h dbname=app user=cdc"},
                        "tables": ["t", {"schema": "S", "name": "u"}]}, "f.yaml")
    text = grants_sql(cfg)
    assert 'GRANT CREATE ON DATABASE "app" TO "cdc";' in text
    assert 'GRANT USAGE ON SCHEMA "S" TO "cdc";' in text
    assert 'GRANT SELECT, TRIGGER ON TABLE "public"."t" TO "cdc";' in text
    assert 'ALTER TABLE "S"."u" OWNER TO "cdc";' in text
    assert "need no grant for pgshovel2" in text and "GRANT pgq_writer" not in text  # writers: nothing of ours


def test_logical_grants_replication_and_ownership():
    cfg = parse_config({"database": {"dsn": "dbname=app user=cdc"}, "backend": "logical", "tables": ["t"]},
                       "f.yaml")
    text = grants_sql(cfg)
    assert 'ALTER ROLE "cdc" REPLICATION;' in text and 'GRANT SELECT ON TABLE "public"."t" TO "cdc";' in text
    assert 'ALTER TABLE "public"."t" OWNER TO "cdc";' in text and "TRIGGER" not in text
