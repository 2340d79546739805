-- pgshovel2_pl, part 2 of 3: the SQL that encodes values and rows as sql/capture/encode.c does.

-- Floats: float4out/float8out give the shortest exact text when extra_float_digits > 0
-- (the C code calls the same shortest-decimal routines); the SET clause pins it here only,
-- so the text forms of other types (point, composites) keep the session's setting, as in C.
CREATE OR REPLACE FUNCTION pgshovel2_pl.f8(v float8) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SET extra_float_digits = 1 SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t text := v::text;
BEGIN
    RETURN CASE t WHEN 'NaN' THEN '"NaN"' WHEN 'Infinity' THEN '"Infinity"'
                  WHEN '-Infinity' THEN '"-Infinity"' WHEN '-0' THEN '-0.0' ELSE t END;
END $$;

CREATE OR REPLACE FUNCTION pgshovel2_pl.f4(v float4) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SET extra_float_digits = 1 SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
SELECT CASE WHEN r LIKE '$%' THEN format('(%s).%I', r, col)
            ELSE r || '."' || replace(col, '"', '""') || '"' END
$$;

-- SQL of the JSON array of the columns attnums of the row expression r (a parameter such
-- as $1) of relation rel, in the order given. Raises an error naming an attnum that is not a
-- live column.
CREATE OR REPLACE FUNCTION pgshovel2_pl.row_sql(rel oid, attnums int2[], r text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT 'ROW(' || string_agg(pgshovel2_pl.field_sql(r, a.attname), ', ' ORDER BY u.i) || ')'
FROM unnest(attnums) WITH ORDINALITY u(n, i)
JOIN pg_catalog.pg_attribute a ON a.attrelid = rel AND a.attnum = u.n AND NOT a.attisdropped
$$;

