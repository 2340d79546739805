-- pgshovel2_pl, part 1 of 3 (files run in name order): the capture trigger and row encoder of sql/capture in PL/pgSQL, for servers
-- where the C extension cannot be installed (managed PostgreSQL, no superuser). PG 14-18.
-- Installed by "pgshovel set create" (capture: plpgsql) into the schema pgshovel2_pl by the
-- set's database role; it coexists with the C extension (schema pgshovel2). See README.rst.
-- Writers of captured tables need nothing of ours: the trigger functions run as the set's role
-- (SECURITY DEFINER, search_path pinned), the only one that may append to the queue.
-- Values are written exactly as sql/capture/encode.c writes them (sql/capture/README.rst).
-- String literals below use E'' where they hold backslashes: their meaning must not depend
-- on standard_conforming_strings when a body is compiled.

-- (CREATE SCHEMA IF NOT EXISTS would want CREATE on the database even where the DBA made the
-- schema for the set's role: CREATE SCHEMA pgshovel2_pl AUTHORIZATION <role>, set create --print-grants.)
DO $$ BEGIN
    IF pg_catalog.to_regnamespace('pgshovel2_pl') IS NULL THEN
        CREATE SCHEMA pgshovel2_pl;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pgshovel2_pl.version() RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT '6' $$;

-- The layout each (queue, table) was last captured in: captured attnums, key attnums, the
-- table_columns rows of the captured columns (text), mode and table tag as installed.
-- Written by register() at install, by _prepare() when a writer finds the layout changed.
CREATE TABLE IF NOT EXISTS pgshovel2_pl.layout (
    queue text NOT NULL,
    rel oid NOT NULL,
    tag text NOT NULL,
    mode text NOT NULL,
    cols int2[] NOT NULL,
    keys int2[] NOT NULL,
    columns text NOT NULL,
    PRIMARY KEY (queue, rel)
);
REVOKE ALL ON pgshovel2_pl.layout FROM PUBLIC;

-- The catalog signature (_sig_of) each (queue, table)'s generated trigger function was
-- generated at; NULL when generated for a layout other than the live one; no row: generated
-- by version 2. Written by _generate(). (Not a column of layout: adding one to a version 2
-- install would be an ALTER TABLE, which the C extension's event trigger, if installed,
-- refuses to a role without rights on its schema.)
CREATE TABLE IF NOT EXISTS pgshovel2_pl.layout_sig (
    queue text NOT NULL,
    rel oid NOT NULL,
    sig text,
    PRIMARY KEY (queue, rel)
);
REVOKE ALL ON pgshovel2_pl.layout_sig FROM PUBLIC;

-- Same query as pgshovel2.table_columns (sql/capture) and pgshovel2.catalog._COLUMNS_SQL.
CREATE OR REPLACE FUNCTION pgshovel2_pl.table_columns(rel oid, attnums int2[]) RETURNS json
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
WITH RECURSIVE base(attnum, typid, typmod, depth) AS (
    SELECT a.attnum, a.atttypid, a.atttypmod, 0 FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
      AND (attnums IS NULL OR a.attnum = ANY (attnums))
  UNION ALL
    SELECT b.attnum, t.typbasetype, t.typtypmod, b.depth + 1
    FROM base b JOIN pg_catalog.pg_type t ON t.oid = b.typid WHERE t.typtype = 'd'
), resolved AS (
    SELECT DISTINCT ON (attnum) attnum, typid, typmod FROM base ORDER BY attnum, depth DESC
)
SELECT coalesce(json_agg(json_build_array(
           a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
           t.typname, t.typtype, t.typcategory = 'A', e.typname, e.typtype, r.typmod,
           CASE WHEN a.atthasmissing THEN to_json(a.attmissingval) -> 0 END)
         ORDER BY a.attnum), '[]'::json)
FROM resolved r
JOIN pg_catalog.pg_attribute a ON a.attrelid = rel AND a.attnum = r.attnum
JOIN pg_catalog.pg_type t ON t.oid = r.typid
LEFT JOIN pg_catalog.pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem
$$;

-- The catalog rows the layout of rel's live columns depends on besides rel's pg_attribute
-- rows: their types, the domains' base types and the arrays' element types, transitively,
-- and those types' schemas (format_type and table_columns read their names).
CREATE OR REPLACE FUNCTION pgshovel2_pl._sig_deps(rel oid, OUT types oid[], OUT nsps oid[])
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    WITH RECURSIVE ty(typ) AS (
        SELECT a.atttypid FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
      UNION
        SELECT v.x FROM ty JOIN pg_catalog.pg_type t ON t.oid = ty.typ,
             LATERAL (VALUES (t.typbasetype), (t.typelem)) v(x)
        WHERE v.x <> 0
    )
    SELECT coalesce(array_agg(t.oid ORDER BY t.oid), '{}'),
           coalesce(array_agg(DISTINCT t.typnamespace ORDER BY t.typnamespace), '{}')
    INTO types, nsps
    FROM ty JOIN pg_catalog.pg_type t ON t.oid = ty.typ;
END $$;

-- The catalog signature of rel's layout: the row versions (ctid and xmin) of everything
-- table_columns(), live_layout() and the generated code read: every pg_attribute row of rel
-- (dropped ones too) and the pg_type and pg_namespace rows of _sig_deps (types, nsps).
-- Every DDL that changes a layout updates one of those rows, and an update writes a new row
-- version: ADD COLUMN (a new row), DROP/RENAME COLUMN, ALTER COLUMN TYPE, SET/DROP NOT NULL,
-- a table rewrite (atthasmissing), renaming a column's type, its domain, the domain's base
-- type, an element type or their schema, ALTER TYPE ... SET. A second update of the same row
-- in one transaction keeps the xmin but not the ctid (the first version stays until that
-- transaction ends); a ctid is reused only after its version is dead and pruned, so equal
-- (ctid, xmin) would take a transaction id reused after 2^32 others. Some DDL changes the
-- signature but no layout (SET STATISTICS, ALTER DOMAIN ADD CONSTRAINT, VACUUM FULL of the
-- catalogs): that costs one full check and a regeneration. Three indexed lookups with cached
-- plans, row versions as text (no values to format) in the index scans' order (no sort: a
-- changed order can only make a difference, never hide one): the generated trigger function
-- runs it once per transaction instead of the full check.
CREATE OR REPLACE FUNCTION pgshovel2_pl._sig_of(rel oid, types oid[], nsps oid[]) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sig text;
BEGIN
    SELECT concat(
        (SELECT string_agg(a.ctid::text || a.xmin, ',') FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = rel AND a.attnum > 0), '|',
        (SELECT string_agg(t.ctid::text || t.xmin, ',') FROM pg_catalog.pg_type t
         WHERE t.oid = ANY (types)), '|',
        (SELECT string_agg(n.ctid::text || n.xmin, ',') FROM pg_catalog.pg_namespace n
         WHERE n.oid = ANY (nsps)))
    INTO sig;
    RETURN sig;
END $$;

-- The catalog signature of rel now.
CREATE OR REPLACE FUNCTION pgshovel2_pl._sig(rel oid) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgshovel2_pl._sig_of(rel, d.types, d.nsps) FROM pgshovel2_pl._sig_deps(rel) d $$;
