-- pgshovel2 capture extension, update 0.3 -> 0.4: no function of ours resolves a name through the
-- caller's search_path, and set upgrade / set drop by a role that does not own the tables.
\echo Use "ALTER EXTENSION pgshovel2 UPDATE TO '0.4'" to load this file. \quit

-- Every SQL and PL/pgSQL function pins search_path (CVE-2018-1058): an event trigger runs as the
-- role issuing the DDL, with that session's search_path, so on_alter_table's comparisons (e.g.
-- oid = regclass) and table_columns' calls (to_json, format_type, ...) would pick an operator or
-- a function that a role able to create objects in a schema on that path made first -- and run it
-- as the DDL's role. The C functions (capture, encode_row) look no name up (encode.c pins the
-- search_path itself for reg* output) and stay as they are: a SET clause on the row trigger would
-- cost every captured row.
ALTER FUNCTION table_columns(oid, int2[]) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION trigger_args(bytea) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION on_alter_table() SET search_path = pg_catalog, pg_temp;

-- Drop trigger tgname of table rel when it is a replication set's (named pgshovel2_<set>_<hash>,
-- with a suffix for its TRUNCATE and partition triggers) and runs a function of schema pgshovel2 or
-- pgshovel2_pl; true when it was dropped, false when rel has no such trigger. For set upgrade, set
-- drop and the relay's partition watch when their role holds TRIGGER on the table but does not own
-- it (PostgreSQL lets only an owner DROP TRIGGER): SECURITY DEFINER, executable by no one but the
-- roles the DBA grants it to (pgshovel set create --print-grants). The session's role must hold
-- TRIGGER on rel.
CREATE FUNCTION drop_trigger(rel regclass, trigger_name name) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    fn_schema name;
BEGIN
    IF NOT pg_catalog.has_table_privilege(session_user, rel, 'TRIGGER') THEN
        RAISE EXCEPTION 'pgshovel2.drop_trigger(): role % lacks TRIGGER on table %', session_user, rel
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT n.nspname INTO fn_schema FROM pg_catalog.pg_trigger t
    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
    WHERE t.tgrelid OPERATOR(pg_catalog.=) rel::pg_catalog.oid AND t.tgname OPERATOR(pg_catalog.=) trigger_name
      AND NOT t.tgisinternal;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF trigger_name NOT LIKE 'pgshovel2\_%' OR fn_schema NOT IN ('pgshovel2', 'pgshovel2_pl') THEN
        RAISE EXCEPTION 'pgshovel2.drop_trigger(): trigger % on % is not a replication set''s', trigger_name, rel
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', trigger_name, rel);
    RETURN true;
END $$;
REVOKE ALL ON FUNCTION drop_trigger(regclass, name) FROM PUBLIC;
