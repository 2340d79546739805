-- pgshovel2 capture extension, version 0.1.
\echo Use "CREATE EXTENSION pgshovel2" to load this file. \quit

-- Row trigger (AFTER INSERT/UPDATE/DELETE FOR EACH ROW) and statement trigger
-- (AFTER TRUNCATE) that append one event per change to a PgQ queue.
-- Arguments: queue name, table tag, captured attnums ("1,2,5"),
-- key attnums ("1" or ""), 'all' | 'subset'.
CREATE FUNCTION capture() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pgshovel2_capture' LANGUAGE C;

-- The same JSON array encoding the trigger writes, for snapshot reads:
--   SELECT pgshovel2.encode_row(t, '{1,2,5}') FROM some_table t
CREATE FUNCTION encode_row(record, int2[]) RETURNS text
    AS 'MODULE_PATHNAME', 'pgshovel2_encode_row' LANGUAGE C STRICT STABLE;
