-- pgshovel2_pl: the capture trigger and row encoder of sql/capture in PL/pgSQL, for servers
-- where the C extension cannot be installed (managed PostgreSQL, no superuser). PG 14-18.
-- Installed by "pgshovel set create" (capture: plpgsql) into the schema pgshovel2_pl by the
-- set's database role; it coexists with the C extension (schema pgshovel2). See README.rst.
-- Writers of captured tables need what PgQ needs to append (membership in pgq_writer).
-- Values are written exactly as sql/capture/encode.c writes them (sql/capture/README.rst).
-- String literals below use E'' where they hold backslashes: their meaning must not depend
-- on standard_conforming_strings when a body is compiled.

CREATE SCHEMA IF NOT EXISTS pgshovel2_pl;

CREATE OR REPLACE FUNCTION pgshovel2_pl.version() RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT '3' $$;

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
LANGUAGE sql STABLE AS $$
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
LANGUAGE plpgsql STABLE AS $$
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
LANGUAGE plpgsql STABLE AS $$
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
LANGUAGE sql STABLE AS $$ SELECT pgshovel2_pl._sig_of(rel, d.types, d.nsps) FROM pgshovel2_pl._sig_deps(rel) d $$;

-- Floats: float4out/float8out give the shortest exact text when extra_float_digits > 0
-- (the C code calls the same shortest-decimal routines); the SET clause pins it here only,
-- so the text forms of other types (point, composites) keep the session's setting, as in C.
CREATE OR REPLACE FUNCTION pgshovel2_pl.f8(v float8) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SET extra_float_digits = 1 AS $$
DECLARE
    t text := v::text;
BEGIN
    RETURN CASE t WHEN 'NaN' THEN '"NaN"' WHEN 'Infinity' THEN '"Infinity"'
                  WHEN '-Infinity' THEN '"-Infinity"' WHEN '-0' THEN '-0.0' ELSE t END;
END $$;

CREATE OR REPLACE FUNCTION pgshovel2_pl.f4(v float4) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SET extra_float_digits = 1 AS $$
DECLARE
    t text := v::text;
BEGIN
    RETURN CASE t WHEN 'NaN' THEN '"NaN"' WHEN 'Infinity' THEN '"Infinity"'
                  WHEN '-Infinity' THEN '"-Infinity"' WHEN '-0' THEN '-0.0' ELSE t END;
END $$;

-- A value's output-function text as a JSON string, escaped as encode.c escapes: to_json's
-- escapes, except that \b and \f become \u0008 and \u000c. format('%s') calls the type's
-- output function (a cast to text would not: bpchar, inet and "char" casts differ).
CREATE OR REPLACE FUNCTION pgshovel2_pl.str(v anyelement) RETURNS text
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    j text := to_json(format('%s', v))::text;
BEGIN
    IF strpos(j, E'\\b') = 0 AND strpos(j, E'\\f') = 0 THEN
        RETURN j;
    END IF;
    -- Every backslash of to_json's output starts an escape; split at the escaped backslashes
    -- (left to right, as the escapes are) and fix the others.
    RETURN array_to_string(ARRAY(
        SELECT replace(replace(p, E'\\b', E'\\u0008'), E'\\f', E'\\u000c')
        FROM unnest(string_to_array(j, E'\\\\')) WITH ORDINALITY u(p, i) ORDER BY i), E'\\\\');
END $$;

-- The base type of a type (domains resolved).
CREATE OR REPLACE FUNCTION pgshovel2_pl.base_type(typ oid) RETURNS oid
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    b oid;
BEGIN
    LOOP
        SELECT typbasetype INTO b FROM pg_catalog.pg_type WHERE oid = typ AND typtype = 'd';
        EXIT WHEN NOT FOUND;
        typ := b;
    END LOOP;
    RETURN typ;
END $$;

-- SQL of the JSON form of a value of type typ (an expression x, evaluated more than once):
-- text, or NULL when x is NULL. The forms of encode.c's pgshovel2_encode_value.
CREATE OR REPLACE FUNCTION pgshovel2_pl.value_sql(x text, typ oid) RETURNS text
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    base oid := pgshovel2_pl.base_type(typ);
    v text := format('(%s)::%s', x, base::regtype);
    elem oid;
BEGIN
    CASE base
    WHEN 'bool'::regtype THEN
        RETURN format($f$CASE %s WHEN true THEN 'true' WHEN false THEN 'false' END$f$, v);
    WHEN 'int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'oid'::regtype THEN
        RETURN format('%s::text', v);
    WHEN 'float4'::regtype, 'float8'::regtype THEN  -- f4/f8 inline while extra_float_digits > 0
        RETURN format($f$CASE WHEN pg_catalog.current_setting('extra_float_digits')::int4 <= 0 $f$
                      || $f$THEN pgshovel2_pl.%2$s(%1$s) $f$
                      || $f$WHEN %1$s::text IN ('NaN', 'Infinity', '-Infinity') THEN '"' || %1$s::text || '"' $f$
                      || $f$WHEN %1$s::text = '-0' THEN '-0.0' ELSE %1$s::text END$f$,
                      v, CASE base WHEN 'float4'::regtype THEN 'f4' ELSE 'f8' END);
    WHEN 'text'::regtype, 'varchar'::regtype THEN  -- str() inline unless \b or \f need fixing
        RETURN format($f$CASE WHEN strpos(%1$s::text, chr(8)) = 0 AND strpos(%1$s::text, chr(12)) = 0 $f$
                      || $f$THEN to_json(%1$s::text)::text ELSE pgshovel2_pl.str(%1$s) END$f$, v);
    WHEN 'date'::regtype THEN  -- days since 2000-01-01; infinities int32 max/min
        RETURN format($f$CASE WHEN %1$s = 'infinity'::date THEN '2147483647' $f$
                      || $f$WHEN %1$s = '-infinity'::date THEN '-2147483648' $f$
                      || $f$ELSE (%1$s - '2000-01-01'::date)::text END$f$, v);
    WHEN 'time'::regtype THEN  -- microseconds since midnight
        RETURN format('(extract(epoch FROM %s) * 1000000)::int8::text', v);
    WHEN 'timestamp'::regtype, 'timestamptz'::regtype THEN  -- microseconds since 2000-01-01 UTC
        RETURN format($f$CASE WHEN %1$s = 'infinity'::%2$s THEN '9223372036854775807' $f$
                      || $f$WHEN %1$s = '-infinity'::%2$s THEN '-9223372036854775808' $f$
                      || $f$ELSE ((extract(epoch FROM %1$s) - 946684800) * 1000000)::int8::text END$f$,
                      v, base::regtype);
    WHEN 'interval'::regtype THEN  -- [months, days, microseconds]
        RETURN format($f$CASE WHEN NOT isfinite(%1$s) THEN CASE WHEN %1$s > '0'::interval $f$
                      || $f$THEN '[2147483647,2147483647,9223372036854775807]' $f$
                      || $f$ELSE '[-2147483648,-2147483648,-9223372036854775808]' END $f$
                      || $f$ELSE '[' || (extract(year FROM %1$s) * 12 + extract(month FROM %1$s))::int4 $f$
                      || $f$|| ',' || extract(day FROM %1$s)::int4 || ',' || (extract(hour FROM %1$s) $f$
                      || $f$* 3600000000 + extract(minute FROM %1$s) * 60000000 $f$
                      || $f$+ extract(microseconds FROM %1$s))::int8 || ']' END$f$, v);
    WHEN 'bytea'::regtype THEN
        RETURN format($f$'"' || encode(%s, 'hex') || '"'$f$, v);
    ELSE
        elem := pgshovel2_pl.own_form_element(base);
        IF elem IS NULL THEN
            RETURN format('pgshovel2_pl.str(%s)', x);
        END IF;
        RETURN pgshovel2_pl.array_sql(v, elem);
    END CASE;
END $$;

-- The element type of an array type whose elements have forms of their own (the types of
-- value_sql above, not domains over them: encode.c's has_own_form), else NULL.
CREATE OR REPLACE FUNCTION pgshovel2_pl.own_form_element(typ oid) RETURNS oid
LANGUAGE sql STABLE STRICT AS $$
SELECT t.typelem FROM pg_catalog.pg_type t
WHERE t.oid = typ AND t.typelem <> 0 AND t.typlen = -1
  AND t.typsubscript = 'pg_catalog.array_subscript_handler'::regproc
  AND t.typelem IN ('bool'::regtype, 'float4'::regtype, 'float8'::regtype, 'date'::regtype,
                    'time'::regtype, 'timestamp'::regtype, 'timestamptz'::regtype,
                    'interval'::regtype, 'bytea'::regtype)
$$;

-- SQL of an array's form (v: an expression of the array type): a JSON array of the element
-- forms when it has one dimension with lower bound 1 (or none), else
-- {"dims": [..], "lower_bounds": [..], "elements": [..]} (elements flat, storage order).
CREATE OR REPLACE FUNCTION pgshovel2_pl.array_sql(v text, elem oid) RETURNS text
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    elements text := format($f$'[' || coalesce((SELECT string_agg(coalesce(%s, 'null'), ',' $f$
                            || $f$ORDER BY u.i) FROM unnest(%s) WITH ORDINALITY u(e, i)), '') || ']'$f$,
                            pgshovel2_pl.value_sql('u.e', elem), v);
BEGIN
    RETURN format($f$CASE WHEN %1$s IS NULL THEN NULL $f$
                  || $f$WHEN array_ndims(%1$s) IS NULL OR (array_ndims(%1$s) = 1 AND array_lower(%1$s, 1) = 1) $f$
                  || $f$THEN %2$s ELSE '{"dims":[' || array_to_string(ARRAY(SELECT array_length(%1$s, d) $f$
                  || $f$FROM generate_series(1, array_ndims(%1$s)) d), ',') || '],"lower_bounds":[' $f$
                  || $f$|| array_to_string(ARRAY(SELECT array_lower(%1$s, d) $f$
                  || $f$FROM generate_series(1, array_ndims(%1$s)) d), ',') || '],"elements":' || %2$s $f$
                  || $f$|| '}' END$f$, v, elements);
END $$;

-- SQL of the column col of the row r: ($1).col for a parameter, NEW.col for a trigger's
-- row variable (PL/pgSQL resolves NEW.col as a field of NEW; col always quoted: PL/pgSQL
-- reads unquoted words such as "by" as its own keywords).
CREATE OR REPLACE FUNCTION pgshovel2_pl.field_sql(r text, col name) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
SELECT CASE WHEN r LIKE '$%' THEN format('(%s).%I', r, col)
            ELSE r || '."' || replace(col, '"', '""') || '"' END
$$;

-- SQL of the JSON array of the columns attnums of the row expression r (a parameter such
-- as $1) of relation rel, in the order given. Raises an error naming an attnum that is not a
-- live column.
CREATE OR REPLACE FUNCTION pgshovel2_pl.row_sql(rel oid, attnums int2[], r text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    parts text[] := '{}';
    n int2;
    att record;
BEGIN
    FOREACH n IN ARRAY attnums LOOP
        SELECT attname, atttypid INTO att FROM pg_catalog.pg_attribute
        WHERE attrelid = rel AND attnum = n AND NOT attisdropped;
        IF NOT FOUND OR n < 1 THEN
            RAISE EXCEPTION 'pgshovel2_pl: no column with attnum % in %', n, rel::regclass;
        END IF;
        parts := parts || format($f$coalesce(%s, 'null')$f$,
                                 pgshovel2_pl.value_sql(pgshovel2_pl.field_sql(r, att.attname), att.atttypid));
    END LOOP;
    IF cardinality(parts) = 0 THEN
        RETURN $f$'[]'$f$;
    END IF;
    RETURN $f$'[' || $f$ || array_to_string(parts, $f$ || ',' || $f$) || $f$ || ']'$f$;
END $$;

-- SQL of ROW(the columns attnums of r) of relation rel, for binary comparisons
-- (record_image_eq, the *= operator: datumIsEqual in capture.c; a row constructor compared
-- with *= would compare column by column with the columns' own *= operators).
CREATE OR REPLACE FUNCTION pgshovel2_pl.cols_sql(rel oid, attnums int2[], r text) RETURNS text
LANGUAGE sql STABLE AS $$
SELECT 'ROW(' || string_agg(pgshovel2_pl.field_sql(r, a.attname), ', ' ORDER BY u.i) || ')'
FROM unnest(attnums) WITH ORDINALITY u(n, i)
JOIN pg_catalog.pg_attribute a ON a.attrelid = rel AND a.attnum = u.n AND NOT a.attisdropped
$$;

-- Record the layout a set captures a table in (the set's install and upgrade call it, as the
-- set's role, with the trigger's arguments) and generate its row trigger function (_generate);
-- returns that function's name (pgshovel2_pl.c<relid>_<hash of queue>), which the set's
-- ROW trigger executes with the same arguments as capture(). Replaces an earlier record
-- of the same queue.
-- The recorded columns are compared, not sent: they are computed with a fixed search_path
-- (format_type qualifies every type outside pg_catalog), as _prepare() computes the live ones.
DO $$ BEGIN  -- version 1's register() returned void
    IF (SELECT prorettype FROM pg_catalog.pg_proc WHERE oid = to_regprocedure(
            'pgshovel2_pl.register(text, regclass, text, int2[], int2[], text)')) = 'void'::regtype THEN
        DROP FUNCTION pgshovel2_pl.register(text, regclass, text, int2[], int2[], text);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pgshovel2_pl.register(queue text, rel regclass, tag text, cols int2[],
                                                 keys int2[], mode text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    l pgshovel2_pl.layout;
BEGIN
    INSERT INTO pgshovel2_pl.layout AS o (queue, rel, tag, mode, cols, keys, columns)
    VALUES (register.queue, register.rel, register.tag, register.mode, register.cols, register.keys,
            pgshovel2_pl.table_columns(register.rel, register.cols)::text)
    ON CONFLICT (queue, rel) DO UPDATE
    SET tag = EXCLUDED.tag, mode = EXCLUDED.mode, cols = EXCLUDED.cols, keys = EXCLUDED.keys,
        columns = EXCLUDED.columns
    RETURNING o.* INTO l;
    RETURN pgshovel2_pl._generate(l);
END $$;

-- Name (unqualified) of the generated row trigger function of (queue, rel), and the suffix of
-- its transaction-local settings (<relid>_<md5(queue)>).
CREATE OR REPLACE FUNCTION pgshovel2_pl.trigger_function(queue text, rel oid) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT 'c' || rel || '_' || left(md5(queue), 16) $$;

CREATE OR REPLACE FUNCTION pgshovel2_pl._key(queue text, rel oid) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT rel || '_' || md5(queue) $$;

-- What a generated function was generated for: changes with any part of the layout.
CREATE OR REPLACE FUNCTION pgshovel2_pl._stamp(l pgshovel2_pl.layout) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT md5(concat_ws('|', l.tag, l.mode, l.cols, l.keys, l.columns)) $$;

-- Generate pgshovel2_pl.q<queue_id>(ev_type, ev_data, ev_extra1, ev_extra2) unless there:
-- appends an event to the queue's current event table by static INSERTs (one per event
-- table, plans cached), reading queue_cur_table per event as pgq.insert_event_raw does;
-- a table beyond the generated ones, or disabled inserts, go through pgq.insert_event.
-- SECURITY DEFINER (the installer's PgQ rights), executable by pgq_writer like pgq.insert_event.
-- Returns its name (unqualified).
CREATE OR REPLACE FUNCTION pgshovel2_pl._generate_queue(queue_name text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    q record;
    fname text;
    branches text := '';
BEGIN
    SELECT * INTO q FROM pgq.queue WHERE pgq.queue.queue_name = _generate_queue.queue_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2_pl: PgQ queue "%" does not exist', queue_name;
    END IF;
    fname := 'q' || q.queue_id;
    IF to_regproc('pgshovel2_pl.' || fname) IS NOT NULL
       AND (SELECT p.prosrc LIKE '%' || md5(queue_name) || '%' FROM pg_proc p
            WHERE p.oid = to_regproc('pgshovel2_pl.' || fname)) THEN
        RETURN fname;
    END IF;
    FOR n IN 0 .. q.queue_ntables - 1 LOOP
        branches := branches || format(
            E'    WHEN %s THEN\n        INSERT INTO %s (ev_id, ev_time, ev_type, ev_data, ev_extra1, ev_extra2)\n'
            || E'        VALUES (pg_catalog.nextval(%L::pg_catalog.regclass), pg_catalog.now(), t, d, x1, x2);\n',
            n, pgq.quote_fqname(q.queue_data_pfx || '_' || n), q.queue_event_seq);
    END LOOP;
    EXECUTE format($g$
CREATE OR REPLACE FUNCTION pgshovel2_pl.%1$I(t text, d text, x1 text, x2 text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $q$
-- queue %2$L (md5 %3$s), generated by pgshovel2_pl._generate_queue
DECLARE
    cur int4;
    off bool;
BEGIN
    SELECT queue_cur_table, queue_disable_insert INTO cur, off FROM pgq.queue
    WHERE queue_id OPERATOR(pg_catalog.=) %4$s;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2_pl: PgQ queue "%%" (id %4$s) does not exist', %2$L
            USING HINT = 'Drop the capture triggers or recreate the replication set.';
    END IF;
    IF off THEN
        PERFORM pgq.insert_event(%2$L, t, d, x1, x2, NULL, NULL);
        RETURN;
    END IF;
    CASE cur
%5$s    ELSE
        PERFORM pgq.insert_event(%2$L, t, d, x1, x2, NULL, NULL);
    END CASE;
END $q$ $g$, fname, queue_name, md5(queue_name), q.queue_id, branches);
    EXECUTE format('REVOKE ALL ON FUNCTION pgshovel2_pl.%I(text, text, text, text) FROM PUBLIC', fname);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgq_writer') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgshovel2_pl.%I(text, text, text, text) TO pgq_writer', fname);
    END IF;
    RETURN fname;
END $$;

-- Generate (CREATE OR REPLACE) the row trigger function of layout l: its statements are
-- static (PL/pgSQL caches their plans), the per-row work of _row() without EXECUTE. It
-- checks once per transaction (setting pgshovel2_pl.s<key>) that the table's layout is
-- still the one it was generated for: the catalog signature (_sig_of) it was generated at
-- unchanged, or else the full check (_check: may append an S event and regenerate it);
-- when that finds another layout, the row goes through _row(). As a TRUNCATE trigger it
-- appends the 'T' event. Records the signature (layout_sig; NULL, matching nothing, when l
-- is not the table's live layout: the first write then appends the S event). Called with
-- the layout row locked (register's upsert, _prepare's FOR UPDATE). Returns its name
-- (unqualified).
CREATE OR REPLACE FUNCTION pgshovel2_pl._generate(l pgshovel2_pl.layout) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    fname text := pgshovel2_pl.trigger_function(l.queue, l.rel);
    skip text := 'false';
    before text := 'false';
    live pgshovel2_pl.layout := pgshovel2_pl.live_layout(l);
    deps record := pgshovel2_pl._sig_deps(l.rel);
    new_sig text;
BEGIN
    IF (live.cols, live.keys, live.columns) IS NOT DISTINCT FROM (l.cols, l.keys, l.columns) THEN
        new_sig := pgshovel2_pl._sig_of(l.rel, deps.types, deps.nsps);
    END IF;
    INSERT INTO pgshovel2_pl.layout_sig AS o (queue, rel, sig) VALUES (l.queue, l.rel, new_sig)
    ON CONFLICT (queue, rel) DO UPDATE SET sig = EXCLUDED.sig;
    IF l.mode LIKE 'subset%' AND cardinality(l.cols) > 0 THEN
        skip := 'pg_catalog.record_image_eq(' || pgshovel2_pl.cols_sql(l.rel, l.cols, 'NEW') || ', '
                || pgshovel2_pl.cols_sql(l.rel, l.cols, 'OLD') || ')';
    END IF;
    IF l.mode LIKE '%,before%' THEN
        before := 'true';
    ELSIF cardinality(l.keys) > 0 THEN
        before := 'NOT pg_catalog.record_image_eq(' || pgshovel2_pl.cols_sql(l.rel, l.keys, 'NEW') || ', '
                  || pgshovel2_pl.cols_sql(l.rel, l.keys, 'OLD') || ')';
    END IF;
    EXECUTE format($g$
CREATE OR REPLACE FUNCTION pgshovel2_pl.%1$I() RETURNS trigger
LANGUAGE plpgsql AS $c$
-- table %2$s, queue %3$L; generated by pgshovel2_pl._generate
DECLARE
    data text;
    before text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pgshovel2_pl.%10$I('T', NULL, TG_ARGV[1], NULL);
        RETURN NULL;
    END IF;
    IF pg_catalog.current_setting('pgshovel2_pl.s%4$s', true) IS DISTINCT FROM '%5$s' THEN
        IF pgshovel2_pl._sig_of(%11$L::pg_catalog.oid, %12$L, %13$L) OPERATOR(pg_catalog.=) %14$L THEN
            PERFORM pg_catalog.set_config('pgshovel2_pl.s%4$s', '%5$s', true);
        ELSIF pgshovel2_pl._check(TG_ARGV[0], TG_RELID) IS DISTINCT FROM '%5$s' THEN
            PERFORM pgshovel2_pl._row(TG_ARGV[0], TG_ARGV[1], TG_RELID, TG_OP, NEW, OLD);
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP = 'INSERT' THEN
        data := %6$s;
    ELSIF TG_OP = 'DELETE' THEN
        data := %7$s;
    ELSE
        IF %8$s THEN
            RETURN NULL;
        END IF;
        data := %6$s;
        IF %9$s THEN
            before := %7$s;
        END IF;
    END IF;
    PERFORM pgshovel2_pl.%10$I(pg_catalog.left(TG_OP, 1), data, TG_ARGV[1], before);
    RETURN NULL;
END $c$ $g$, fname, l.rel::regclass, l.queue, pgshovel2_pl._key(l.queue, l.rel), pgshovel2_pl._stamp(l),
           pgshovel2_pl.row_sql(l.rel, l.cols, 'NEW'), pgshovel2_pl.row_sql(l.rel, l.cols, 'OLD'),
           skip, before, pgshovel2_pl._generate_queue(l.queue), l.rel::oid, deps.types, deps.nsps, new_sig);
    RETURN fname;
END $$;

-- The layout of (queue, rel) now: the recorded one, or, when the table's columns changed
-- since (ADD/DROP/RENAME/ALTER TYPE of a column), the new one: mode 'all': every live
-- column; 'subset': the recorded ones still alive; keys: the recorded ones still alive.
CREATE OR REPLACE FUNCTION pgshovel2_pl.live_layout(l pgshovel2_pl.layout) RETURNS pgshovel2_pl.layout
LANGUAGE plpgsql STABLE AS $$
DECLARE
    live int2[];
BEGIN
    SELECT coalesce(array_agg(attnum ORDER BY attnum), '{}') INTO live FROM pg_catalog.pg_attribute
    WHERE attrelid = l.rel AND attnum > 0 AND NOT attisdropped;
    IF l.mode LIKE 'all%' THEN
        l.cols := live;
    ELSE
        l.cols := ARRAY(SELECT a FROM unnest(l.cols) a WHERE a = ANY (live) ORDER BY a);
    END IF;
    l.keys := ARRAY(SELECT k FROM unnest(l.keys) WITH ORDINALITY u(k, i) WHERE k = ANY (live) ORDER BY i);
    l.columns := pgshovel2_pl.table_columns(l.rel, l.cols)::text;
    RETURN l;
END $$;

-- Once per transaction, table and queue, before the first row event: the captured layout,
-- after appending an 'S' event when the table's layout differs from the one recorded.
-- event_columns: NULL, or table_columns(rel, NULL) computed with the writer's search_path
-- (the S event carries the captured ones, as the C extension's event trigger writes them
-- with the DDL's search_path). Returns NULL when the layout changed and event_columns is NULL:
-- the caller computes them and calls again (so unchanged layouts cost no such query).
-- The recorded row is locked only on a change: a concurrent first writer waits, re-reads the
-- new record and appends nothing, and its events follow the 'S' event in ev_id order.
-- SECURITY DEFINER: writers need not read or write the layout table; the layout recorded is
-- computed here from the recorded mode (never taken from the caller).
CREATE OR REPLACE FUNCTION pgshovel2_pl._prepare(queue_name text, rel oid, event_columns json DEFAULT NULL)
RETURNS pgshovel2_pl.layout
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rec pgshovel2_pl.layout;
    live pgshovel2_pl.layout;
    recorded_sig text;
BEGIN
    SELECT * INTO rec FROM pgshovel2_pl.layout l WHERE l.queue = queue_name AND l.rel = _prepare.rel;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2_pl: no layout recorded for table % in queue %', rel::regclass, queue_name
            USING HINT = 'Re-create the set''s triggers ("pgshovel set upgrade") or drop them.';
    END IF;
    live := pgshovel2_pl.live_layout(rec);
    IF (live.cols, live.keys, live.columns) IS NOT DISTINCT FROM (rec.cols, rec.keys, rec.columns) THEN
        SELECT s.sig INTO recorded_sig FROM pgshovel2_pl.layout_sig s WHERE s.queue = queue_name AND s.rel = _prepare.rel;
        IF recorded_sig = pgshovel2_pl._sig(rel) THEN
            RETURN rec;
        END IF;
    ELSIF event_columns IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT * INTO rec FROM pgshovel2_pl.layout l WHERE l.queue = queue_name AND l.rel = _prepare.rel
    FOR UPDATE;
    live := pgshovel2_pl.live_layout(rec);
    IF (live.cols, live.keys, live.columns) IS NOT DISTINCT FROM (rec.cols, rec.keys, rec.columns) THEN
        -- the same layout at another signature (e.g. SET STATISTICS): the generated function's
        -- signature check would fail in every transaction until regenerated
        SELECT s.sig INTO recorded_sig FROM pgshovel2_pl.layout_sig s WHERE s.queue = queue_name AND s.rel = _prepare.rel;
        IF recorded_sig IS DISTINCT FROM pgshovel2_pl._sig(rel) THEN
            PERFORM pgshovel2_pl._generate(rec);
        END IF;
        RETURN rec;
    ELSIF event_columns IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM pgq.insert_event(queue_name, 'S',
        json_build_object('schema', n.nspname, 'name', c.relname,
                          'columns', (SELECT coalesce(json_agg(e ORDER BY (e ->> 1)::int), '[]'::json)
                                      FROM json_array_elements(event_columns) e
                                      WHERE (e ->> 1)::int2 = ANY (live.cols)),
                          'key', to_json(live.keys), 'dropped', false)::text,
        rec.tag, to_json('(statement not known: pgshovel2_pl capture found the table''s new layout '
                         'at the first write after it)'::text)::text, NULL, NULL)
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel;
    UPDATE pgshovel2_pl.layout l SET cols = live.cols, keys = live.keys, columns = live.columns
    WHERE l.queue = queue_name AND l.rel = _prepare.rel;
    PERFORM pgshovel2_pl._generate(live);  -- under the row lock: one regeneration at a time
    RETURN live;
END $$;

-- The statements a row trigger of layout l runs, cached in transaction-local settings
-- (pgshovel2_pl.i<key>: INSERT/DELETE, $1 the row; pgshovel2_pl.u<key>: UPDATE, $1 new,
-- $2 old, giving (new row or NULL to skip, old row or NULL)).
CREATE OR REPLACE FUNCTION pgshovel2_pl._cache(l pgshovel2_pl.layout, cache_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    skip text := 'false';
    before text := 'false';
BEGIN
    IF l.mode LIKE 'subset%' AND cardinality(l.cols) > 0 THEN
        skip := 'pg_catalog.record_image_eq(' || pgshovel2_pl.cols_sql(l.rel, l.cols, '$1') || ', '
                || pgshovel2_pl.cols_sql(l.rel, l.cols, '$2') || ')';
    END IF;
    IF l.mode LIKE '%,before%' THEN
        before := 'true';
    ELSIF cardinality(l.keys) > 0 THEN
        before := 'NOT pg_catalog.record_image_eq(' || pgshovel2_pl.cols_sql(l.rel, l.keys, '$1') || ', '
                  || pgshovel2_pl.cols_sql(l.rel, l.keys, '$2') || ')';
    END IF;
    PERFORM set_config('pgshovel2_pl.i' || cache_key,
                       'SELECT ' || pgshovel2_pl.row_sql(l.rel, l.cols, '$1'), true);
    PERFORM set_config('pgshovel2_pl.u' || cache_key,
                       format('SELECT CASE WHEN %s THEN NULL ELSE %s END, CASE WHEN %s THEN %s END',
                              skip, pgshovel2_pl.row_sql(l.rel, l.cols, '$1'), before,
                              pgshovel2_pl.row_sql(l.rel, l.cols, '$2')), true);
END $$;

-- Once per transaction in a generated trigger: the stamp of (queue, rel)'s layout after
-- _prepare (which appends an S event and regenerates the trigger function on a change),
-- also kept in the setting pgshovel2_pl.s<key> the generated function compares with its own.
-- No SET clause (it would undo the setting at the function's exit).
CREATE OR REPLACE FUNCTION pgshovel2_pl._check(queue text, rel oid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    l pgshovel2_pl.layout := pgshovel2_pl._prepare(queue, rel);
BEGIN
    IF l IS NULL THEN
        l := pgshovel2_pl._prepare(queue, rel, pgshovel2_pl.table_columns(rel, NULL));
    END IF;
    RETURN set_config('pgshovel2_pl.s' || pgshovel2_pl._key(queue, rel), pgshovel2_pl._stamp(l), true);
END $$;

-- One row event by a dynamic query (the generic path): op TG_OP, n NEW, o OLD. The query is
-- generated once per transaction, table and queue and kept in transaction-local settings.
CREATE OR REPLACE FUNCTION pgshovel2_pl._row(queue text, tag text, rel oid, op text, n record, o record)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cache_key text := pgshovel2_pl._key(queue, rel);
    setting text := CASE op WHEN 'UPDATE' THEN 'pgshovel2_pl.u' ELSE 'pgshovel2_pl.i' END || cache_key;
    layout pgshovel2_pl.layout;
    q text := current_setting(setting, true);
    data text;
    before text;
BEGIN
    IF q IS NULL OR q = '' THEN
        layout := pgshovel2_pl._prepare(queue, rel);
        IF layout IS NULL THEN
            layout := pgshovel2_pl._prepare(queue, rel, pgshovel2_pl.table_columns(rel, NULL));
        END IF;
        PERFORM pgshovel2_pl._cache(layout, cache_key);
        q := current_setting(setting);
    END IF;
    IF op = 'INSERT' THEN
        EXECUTE q INTO data USING n;
    ELSIF op = 'DELETE' THEN
        EXECUTE q INTO data USING o;
    ELSE
        EXECUTE q INTO data, before USING n, o;
        IF data IS NULL THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pgq.insert_event(queue, left(op, 1), data, tag, before, NULL, NULL);
END $$;

-- The capture trigger: sql/capture's pgshovel2.capture() (same arguments, same events).
-- AFTER ... FOR EACH ROW on INSERT/UPDATE/DELETE, AFTER TRUNCATE FOR EACH STATEMENT.
-- Arguments: queue, table tag, captured attnums, key attnums, mode; the attnums are those
-- of register() (the layout record is what is captured once the table's layout changed).
-- Sets use it for TRUNCATE; their ROW triggers execute the function register() generates
-- (the same events, about 10x faster); as a ROW trigger this one runs _row() for each row.
CREATE OR REPLACE FUNCTION pgshovel2_pl.capture() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_WHEN <> 'AFTER' OR TG_NARGS <> 5 THEN
        RAISE EXCEPTION 'pgshovel2_pl.capture() must be an AFTER trigger with 5 arguments (trigger % on %)',
            TG_NAME, TG_RELID::regclass;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pgq.insert_event(TG_ARGV[0], 'T', NULL, TG_ARGV[1], NULL, NULL, NULL);
        RETURN NULL;
    ELSIF TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION 'pgshovel2_pl.capture() must fire FOR EACH ROW for INSERT/UPDATE/DELETE';
    END IF;
    PERFORM pgshovel2_pl._row(TG_ARGV[0], TG_ARGV[1], TG_RELID, TG_OP, NEW, OLD);
    RETURN NULL;
END $$;

-- sql/capture's pgshovel2.encode_row: a row value in the capture form, for snapshot reads.
--   SELECT pgshovel2_pl.encode_row(t, '{1,2,5}') FROM some_table t
-- The statement is cached per transaction and row type (setting pgshovel2_pl.r<type oid>).
CREATE OR REPLACE FUNCTION pgshovel2_pl.encode_row(r record, attnums int2[]) RETURNS text
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    typ oid := pg_typeof(r)::oid;
    cache_key text := 'pgshovel2_pl.r' || typ;
    cached text := current_setting(cache_key, true);
    head text := attnums::text || ':';
    q text;
    data text;
BEGIN
    IF cached IS NOT NULL AND left(cached, length(head)) = head THEN
        q := substr(cached, length(head) + 1);
    ELSE
        q := 'SELECT ' || pgshovel2_pl.row_sql((SELECT typrelid FROM pg_catalog.pg_type WHERE oid = typ),
                                                attnums, '$1');
        PERFORM set_config(cache_key, head || q, true);
    END IF;
    EXECUTE q INTO data USING r;
    RETURN data;
END $$;
