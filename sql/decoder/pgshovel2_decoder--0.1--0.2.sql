-- pgshovel2_decoder, update 0.1 -> 0.2: every SQL and PL/pgSQL function pins its search_path, so
-- none resolves a name (pg_replication_slots, pg_logical_emit_message, ...) through its caller's
-- (CVE-2018-1058). encode_row is C and looks no name up.
\echo Use "ALTER EXTENSION pgshovel2_decoder UPDATE TO '0.2'" to load this file. \quit

ALTER FUNCTION @extschema@.create_slot(name) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.drop_slot(name) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.slot_position(name) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.heartbeat(name) SET search_path = pg_catalog, pg_temp;
