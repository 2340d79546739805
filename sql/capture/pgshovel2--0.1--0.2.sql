-- pgshovel2 capture extension, update 0.1 -> 0.2: DDL on captured tables.
\echo Use "ALTER EXTENSION pgshovel2 UPDATE TO '0.2'" to load this file. \quit

-- Columns of a table as catalog rows, one JSON array per column, in attnum order,
-- limited to the attnums given (NULL: every live column):
--   [attname, attnum, format_type, nullable, typname, typtype, is_array,
--    element typname, element typtype, base typmod, missing value or null]
-- Domains are resolved to their base type (typname/typtype/typmod are the base's).
-- pgshovel2.catalog._COLUMNS_SQL is the same query; catalog._column() reads the rows.
CREATE FUNCTION table_columns(rel oid, attnums int2[]) RETURNS json
LANGUAGE sql STABLE AS $$
WITH RECURSIVE base(attnum, typid, typmod, depth) AS (
    SELECT a.attnum, a.atttypid, a.atttypmod, 0 FROM pg_attribute a
    WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
      AND (attnums IS NULL OR a.attnum = ANY (attnums))
  UNION ALL
    SELECT b.attnum, t.typbasetype, t.typtypmod, b.depth + 1
    FROM base b JOIN pg_type t ON t.oid = b.typid WHERE t.typtype = 'd'
), resolved AS (
    SELECT DISTINCT ON (attnum) attnum, typid, typmod FROM base ORDER BY attnum, depth DESC
)
SELECT coalesce(json_agg(json_build_array(
           a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
           t.typname, t.typtype, t.typcategory = 'A', e.typname, e.typtype, r.typmod,
           CASE WHEN a.atthasmissing THEN to_json(a.attmissingval) -> 0 END)
         ORDER BY a.attnum), '[]'::json)
FROM resolved r
JOIN pg_attribute a ON a.attrelid = rel AND a.attnum = r.attnum
JOIN pg_type t ON t.oid = r.typid
LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem
$$;

-- The arguments of a trigger (pg_trigger.tgargs: NUL-terminated strings).
CREATE FUNCTION trigger_args(tgargs bytea) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    out text[] := '{}';
    rest bytea := tgargs;
    pos int;
BEGIN
    LOOP
        pos := position('\x00'::bytea IN rest);
        EXIT WHEN pos = 0;
        out := out || convert_from(substring(rest FROM 1 FOR pos - 1),
                                   current_setting('server_encoding'));
        rest := substring(rest FROM pos + 1);
    END LOOP;
    RETURN out;
END $$;

-- After a DDL command on table rel (same transaction, table locked against
-- writers first): for every pgshovel2 ROW capture trigger on it, recompute the
-- captured attnums (mode 'all': every live column; 'subset': the previous ones
-- still alive) and key attnums (the previous ones still alive, same order),
-- append one schema-change event to the trigger's queue, and re-create the
-- trigger with the new attnums (same name, queue, table tag and mode).
-- Event: ev_type 'S'; ev_data {"schema", "name", "columns": table_columns rows,
-- "key": [attnums], "dropped": false}; ev_extra1 table tag; ev_extra2 the
-- statement as a JSON string.
CREATE FUNCTION recapture(rel oid, statement text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    tg record;
    args text[];
    live int2[];
    cols int2[];
    keys int2[];
    done int := 0;
BEGIN
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rel::regclass);
    SELECT array_agg(attnum ORDER BY attnum) INTO live FROM pg_attribute
    WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped;
    live := coalesce(live, '{}');
    FOR tg IN SELECT tgname, tgargs FROM pg_trigger
              WHERE tgrelid = rel AND tgfoid = 'pgshovel2.capture()'::regprocedure
              ORDER BY tgname LOOP
        args := pgshovel2.trigger_args(tg.tgargs);
        CONTINUE WHEN array_length(args, 1) IS DISTINCT FROM 5 OR args[3] = '';  -- TRUNCATE trigger
        IF args[5] LIKE 'all%' THEN
            cols := live;
        ELSE
            cols := ARRAY(SELECT a FROM unnest(string_to_array(args[3], ',')::int2[]) a
                          WHERE a = ANY (live) ORDER BY a);
        END IF;
        keys := ARRAY(SELECT k FROM unnest(string_to_array(args[4], ',')::int2[])
                                    WITH ORDINALITY u(k, i)
                      WHERE k = ANY (live) ORDER BY i);
        PERFORM pgq.insert_event(args[1], 'S',
            json_build_object('schema', n.nspname, 'name', c.relname,
                              'columns', pgshovel2.table_columns(rel, cols),
                              'key', to_json(keys), 'dropped', false)::text,
            args[2], to_json(statement)::text, NULL, NULL)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel;
        EXECUTE format('DROP TRIGGER %I ON %s', tg.tgname, rel::regclass);
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION pgshovel2.capture(%L, %L, %L, %L, %L)',
                       tg.tgname, rel::regclass, args[1], args[2],
                       array_to_string(cols, ','), array_to_string(keys, ','), args[5]);
        done := done + 1;
    END LOOP;
    RETURN done;
END $$;

CREATE FUNCTION on_alter_table() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
    rel oid;
BEGIN
    FOR rel IN SELECT DISTINCT d.objid FROM pg_event_trigger_ddl_commands() d
               JOIN pg_class c ON c.oid = d.objid
               WHERE d.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p') LOOP
        PERFORM pgshovel2.recapture(rel, current_query());
    END LOOP;
END $$;

-- DROP TABLE of a captured table: its triggers (and their arguments) are gone
-- by now, so the queue is found from the trigger's name (pgshovel2_<set>_<hash>,
-- see pgshovel2.capture.trigger.trigger_name) among the queues pgshovel2.<cluster>.<set>.
-- Event: ev_type 'S', ev_data {"schema", "name", "dropped": true}.
CREATE FUNCTION on_drop_table() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    q text;
BEGIN
    FOR d IN SELECT DISTINCT o.address_names[1] AS nsp, o.address_names[2] AS tbl,
                    o.address_names[3] AS tgname
             FROM pg_event_trigger_dropped_objects() o
             WHERE o.object_type = 'trigger' AND o.address_names[3] LIKE 'pgshovel2\_%'
               AND o.address_names[3] NOT LIKE '%\_t' LOOP
        FOR q IN SELECT queue_name FROM pgq.queue
                 WHERE queue_name LIKE 'pgshovel2.%'
                   AND left(d.tgname, length('pgshovel2_' || split_part(queue_name, '.', 3)) + 1)
                       = 'pgshovel2_' || split_part(queue_name, '.', 3) || '_' LOOP
            PERFORM pgq.insert_event(q, 'S',
                json_build_object('schema', d.nsp, 'name', d.tbl, 'dropped', true)::text,
                '"' || replace(d.nsp, '"', '""') || '"."' || replace(d.tbl, '"', '""') || '"',
                to_json(current_query())::text, NULL, NULL);
        END LOOP;
    END LOOP;
END $$;

CREATE EVENT TRIGGER pgshovel2_alter_table ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION on_alter_table();
CREATE EVENT TRIGGER pgshovel2_drop_table ON sql_drop
    WHEN TAG IN ('DROP TABLE') EXECUTE FUNCTION on_drop_table();
