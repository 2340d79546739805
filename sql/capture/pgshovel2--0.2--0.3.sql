-- pgshovel2 capture extension, update 0.2 -> 0.3: partitioned tables.
\echo Use "ALTER EXTENSION pgshovel2 UPDATE TO '0.3'" to load this file. \quit

-- A set capturing a partitioned table T has, besides its capture triggers on T (cloned by
-- PostgreSQL onto T's partitions), three statement triggers for TRUNCATE, named after its
-- capture trigger B (pgshovel2_<set>_<hash>):
--   B_tb  BEFORE TRUNCATE on T, B_ta AFTER TRUNCATE on T: truncate_root(<function>, <args>...)
--   B_tp  BEFORE TRUNCATE on every leaf partition of T: <function>(<args>..., <T's OID>)
-- A TRUNCATE of a partition (or of a partitioned partition) is logged as nothing the stream
-- could turn into rows; B_tp writes the rows it removes first, as the DELETEs of T they are
-- (trigger sets: D events in the set's queue, emit_rows; logical sets:
-- pgshovel2_pl.truncate_message). A TRUNCATE of T itself is T's own TRUNCATE event: while it
-- runs, B_tb/B_ta keep T's OID in the transaction-local setting pgshovel2.truncating
-- ("<oid>,<oid>,...,") and B_tp does nothing. The event triggers pgshovel2_partitions_start and
-- pgshovel2_partitions relay the rows of a partition ATTACHed (as creates) or DETACHed (as
-- deletes) in the DDL's transaction and give new partitions their B_tp; pgshovel2_drop_table
-- refuses a DROP TABLE of a partition (DETACH first). sql/capture/README.rst.

-- Whether an ancestor of partition rel is being truncated (its OID in pgshovel2.truncating).
CREATE FUNCTION truncating_ancestor(rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_partition_ancestors(rel) a
               WHERE a.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) rel
                 AND pg_catalog.strpos(',' OPERATOR(pg_catalog.||)
                                       coalesce(pg_catalog.current_setting('pgshovel2.truncating', true), ''),
                                       ',' OPERATOR(pg_catalog.||) a.relid::pg_catalog.oid::text OPERATOR(pg_catalog.||) ',')
                     OPERATOR(pg_catalog.>) 0)
$$;

-- B_tb and B_ta (above): BEFORE adds the table's OID to pgshovel2.truncating, AFTER takes it out
-- again (a later TRUNCATE of a partition in the same transaction is captured). The arguments
-- (the partitions' truncate trigger function and its arguments) are read by
-- add_partition_triggers(); the function ignores them.
CREATE FUNCTION truncate_root() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    flag text := coalesce(pg_catalog.current_setting('pgshovel2.truncating', true), '');
    me text := TG_RELID::text || ',';
    pos int;
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' THEN
        RAISE EXCEPTION 'pgshovel2.truncate_root() must be a TRUNCATE ... FOR EACH STATEMENT trigger (trigger % on %)',
            TG_NAME, TG_RELID::regclass;
    END IF;
    IF TG_WHEN = 'BEFORE' THEN
        flag := flag || me;
    ELSE
        pos := pg_catalog.strpos(',' || flag, ',' || me);
        IF pos > 0 THEN
            flag := pg_catalog.left(flag, pos - 1) || pg_catalog.substr(flag, pos + pg_catalog.length(me));
        END IF;
    END IF;
    PERFORM pg_catalog.set_config('pgshovel2.truncating', flag, true);
    RETURN NULL;
END $$;

-- The rows of leaf (ONLY leaf; every leaf partition of it when it is partitioned) as op events
-- ('D' or 'I') of root in the queue qname, exactly the events a DELETE or an INSERT of each row would
-- have made: ev_data the row in the capture form (encode_row) of the columns the set's capture
-- trigger on root lists (mapped to the leaf's columns by name), ev_extra1 that trigger's table
-- tag. One INSERT ... SELECT into the queue's current event table per leaf. Returns the number
-- of events; 0 when root has no capture trigger of the queue. SECURITY DEFINER (the queue's rights);
-- not executable by PUBLIC: it writes any rows it is given.
CREATE FUNCTION emit_rows(qname text, root oid, leaf oid, op text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    args text[];
    cols int2[];
    leaf_cols int2[];
    q record;
    part oid;
    n bigint;
    total bigint := 0;
BEGIN
    IF op NOT IN ('D', 'I') THEN
        RAISE EXCEPTION 'pgshovel2.emit_rows(): op must be D or I, not %', op;
    END IF;
    SELECT pgshovel2.trigger_args(t.tgargs) INTO args FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid = root AND t.tgfoid = 'pgshovel2.capture()'::pg_catalog.regprocedure AND t.tgparentid = 0
      AND t.tgtype::int & 1 = 1 AND (pgshovel2.trigger_args(t.tgargs))[1] = qname;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT queue_data_pfx || '_' || queue_cur_table AS tbl, queue_event_seq AS seq, queue_disable_insert AS off
    INTO q FROM pgq.queue WHERE queue_name = qname;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2: PgQ queue % (of the partitions of %) does not exist', qname, root::regclass;
    ELSIF q.off AND pg_catalog.current_setting('session_replication_role') <> 'replica' THEN
        RAISE EXCEPTION 'pgshovel2: writing to PgQ queue % is disabled', qname;
    END IF;
    cols := pg_catalog.string_to_array(args[3], ',')::int2[];
    FOR part IN SELECT c.oid FROM pg_catalog.pg_class c WHERE c.oid = leaf AND c.relkind = 'r'
                UNION SELECT p.relid FROM pg_catalog.pg_partition_tree(leaf) p JOIN pg_catalog.pg_class c ON c.oid = p.relid
                WHERE p.isleaf AND c.relkind = 'r' LOOP
        SELECT pg_catalog.array_agg(l.attnum ORDER BY u.i) INTO leaf_cols
        FROM pg_catalog.unnest(cols) WITH ORDINALITY u(a, i)
        JOIN pg_catalog.pg_attribute r ON r.attrelid = root AND r.attnum = u.a AND NOT r.attisdropped
        JOIN pg_catalog.pg_attribute l ON l.attrelid = part AND l.attname = r.attname AND NOT l.attisdropped;
        IF pg_catalog.cardinality(leaf_cols) IS DISTINCT FROM pg_catalog.cardinality(cols) THEN
            RAISE EXCEPTION 'pgshovel2: % lacks a column % captures (%)', part::regclass, root::regclass, args[3];
        END IF;
        EXECUTE pg_catalog.format(
            'INSERT INTO %s (ev_id, ev_time, ev_txid, ev_type, ev_data, ev_extra1) '
            'SELECT pg_catalog.nextval(%L), pg_catalog.now(), pg_catalog.txid_current(), %L, '
            'pgshovel2.encode_row(p, %L::pg_catalog.int2[]), %L FROM ONLY %s p',
            q.tbl, q.seq, op, leaf_cols, args[2], part::regclass);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;
REVOKE ALL ON FUNCTION emit_rows(text, oid, oid, text) FROM PUBLIC;

-- B_tp of a set with C capture (arguments: its queue, the OID of its table T): the rows a
-- TRUNCATE of the partition removes, as D events of T (emit_rows). SECURITY DEFINER: a role
-- that may truncate the partition needs no right on the queue. Nothing while T itself is
-- truncated, and nothing when the partition is no longer T's (detached).
CREATE FUNCTION truncate_partition() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_NARGS <> 2 THEN
        RAISE EXCEPTION 'pgshovel2.truncate_partition() must be a BEFORE TRUNCATE ... FOR EACH STATEMENT trigger '
            'with two arguments (trigger % on %)', TG_NAME, TG_RELID::regclass;
    END IF;
    IF pgshovel2.truncating_ancestor(TG_RELID) OR NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_partition_ancestors(TG_RELID) a
            WHERE a.relid::oid = TG_ARGV[1]::oid AND a.relid::oid <> TG_RELID) THEN
        RETURN NULL;
    END IF;
    PERFORM pgshovel2.emit_rows(TG_ARGV[0], TG_ARGV[1]::oid, TG_RELID, 'D');
    RETURN NULL;
END $$;

-- The rows of leaf as op ('D', 'I') changes of root for a set whose partitions' TRUNCATE
-- trigger function is fn with args (without the root's OID): the function of that kind of set
-- (emit_rows, pgshovel2_pl.emit_rows, pgshovel2_pl.emit_messages).
CREATE FUNCTION emit(fn text, args text[], root oid, leaf oid, op text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    CASE fn
    WHEN 'pgshovel2.truncate_partition' THEN
        PERFORM pgshovel2.emit_rows(args[1], root, leaf, op);
    WHEN 'pgshovel2_pl.truncate_partition' THEN
        EXECUTE 'SELECT pgshovel2_pl.emit_rows($1, $2, $3, $4)' USING args[1], root, leaf, op;
    WHEN 'pgshovel2_pl.truncate_message' THEN
        EXECUTE 'SELECT pgshovel2_pl.emit_messages($1, $2, $3, $4, $5)' USING args[1], args[2], root, leaf, op;
    ELSE
        RAISE EXCEPTION 'pgshovel2: unknown partition trigger function %', fn;
    END CASE;
END $$;
REVOKE ALL ON FUNCTION emit(text, text[], oid, oid, text) FROM PUBLIC;

-- (set's B_tb trigger name, its table T, leaf) of every leaf partition of every partitioned
-- table a set captures, as text "<B_tb>:<T>:<leaf>," each.
CREATE FUNCTION partition_leaves() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT coalesce(pg_catalog.string_agg(t.tgname || ':' || t.tgrelid || ':' || p.relid::oid || ',', ''), '')
FROM pg_catalog.pg_trigger t
CROSS JOIN LATERAL pg_catalog.pg_partition_tree(t.tgrelid) p
JOIN pg_catalog.pg_class c ON c.oid = p.relid
WHERE t.tgname LIKE 'pgshovel2\_%\_tb' AND t.tgparentid = 0 AND p.isleaf AND p.level > 0 AND c.relkind = 'r'
$$;

-- Give every leaf partition of the tables with a set's B_tb trigger (every such table when rel is
-- NULL, else those that are rel or its ancestors) the set's B_tp trigger (the function and
-- arguments B_tb names, and T's OID); leaves that have it are left alone. Returns the number of
-- triggers created.
CREATE FUNCTION add_partition_triggers(rel oid) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    leaf oid;
    done int := 0;
BEGIN
    FOR r IN SELECT pg_catalog.left(t.tgname, pg_catalog.length(t.tgname) - 3) || '_tp' AS name, t.tgrelid AS root,
                    pgshovel2.trigger_args(t.tgargs) AS args,
                    pg_catalog.to_regproc((pgshovel2.trigger_args(t.tgargs))[1]) AS fn
             FROM pg_catalog.pg_trigger t
             WHERE t.tgname LIKE 'pgshovel2\_%\_tb' AND t.tgparentid = 0
               AND (rel IS NULL OR t.tgrelid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(rel) a)) LOOP
        IF r.fn IS NULL THEN
            RAISE EXCEPTION 'pgshovel2: the truncate trigger function % (of triggers %) does not exist',
                r.args[1], r.name;
        END IF;
        FOR leaf IN SELECT p.relid FROM pg_catalog.pg_partition_tree(r.root) p
                    JOIN pg_catalog.pg_class c ON c.oid = p.relid
                    WHERE p.isleaf AND p.level > 0 AND c.relkind = 'r'
                      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger x
                                      WHERE x.tgrelid = p.relid AND x.tgname = r.name) LOOP
            EXECUTE pg_catalog.format('CREATE TRIGGER %I BEFORE TRUNCATE ON %s FOR EACH STATEMENT '
                                      'EXECUTE FUNCTION %s(%s)', r.name, leaf::regclass, r.fn,
                                      (SELECT pg_catalog.string_agg(pg_catalog.quote_literal(a), ', ' ORDER BY i)
                                       FROM pg_catalog.unnest(r.args[2:] || r.root::text) WITH ORDINALITY u(a, i)));
            done := done + 1;
        END LOOP;
    END LOOP;
    RETURN done;
END $$;
REVOKE ALL ON FUNCTION add_partition_triggers(oid) FROM PUBLIC;

-- ALTER TABLE starts: the partitions of the sets' partitioned tables now (partition_leaves,
-- after a comma), kept in the transaction-local setting pgshovel2.partitions for
-- on_partition_change.
CREATE FUNCTION on_partition_change_start() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.set_config('pgshovel2.partitions', ',' || pgshovel2.partition_leaves(), true);
END $$;

-- CREATE TABLE ... PARTITION OF, ALTER TABLE ... ATTACH / DETACH PARTITION of the partitions of
-- a table a set captures, in the DDL's transaction:
-- - a partition that left its table (a B_tp trigger whose table is no longer its ancestor:
--   DETACH, also CONCURRENTLY): its rows as deletes of the table (emit), its B_tp dropped;
-- - a partition that joined the table in this ALTER TABLE (not among the partitions when it
--   started: ATTACH): its rows as creates of the table (emit);
-- - then every new partition gets its B_tp trigger (add_partition_triggers).
-- SECURITY DEFINER: the DDL's role need not own the queue or hold the functions' rights.
CREATE FUNCTION on_partition_change() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    -- '' (a placeholder setting outside the transaction that set it: DETACH ... CONCURRENTLY
    -- commits in between) is no snapshot
    before text := CASE WHEN TG_TAG = 'ALTER TABLE'
                        THEN NULLIF(pg_catalog.current_setting('pgshovel2.partitions', true), '') END;
BEGIN
    PERFORM pg_catalog.set_config('pgshovel2.partitions', NULL, true);
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands() d
                   JOIN pg_catalog.pg_class c ON c.oid = d.objid
                   WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                     AND (c.relkind = 'p' OR c.relispartition)) THEN
        RETURN;
    END IF;
    FOR r IN SELECT t.tgrelid AS leaf, t.tgname, t.tgfoid::pg_catalog.regproc::text AS fn,
                    pgshovel2.trigger_args(t.tgargs) AS args
             FROM pg_catalog.pg_trigger t
             WHERE t.tgname LIKE 'pgshovel2\_%\_tp' AND t.tgparentid = 0 LOOP
        CONTINUE WHEN pg_catalog.cardinality(r.args) < 2 OR EXISTS (
            SELECT 1 FROM pg_catalog.pg_partition_ancestors(r.leaf) a
            WHERE a.relid::oid = r.args[pg_catalog.cardinality(r.args)]::oid AND a.relid::oid <> r.leaf);
        PERFORM pgshovel2.emit(r.fn, r.args[1:pg_catalog.cardinality(r.args) - 1],
                               r.args[pg_catalog.cardinality(r.args)]::oid, r.leaf, 'D');
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', r.tgname, r.leaf::regclass);
    END LOOP;
    IF before IS NOT NULL THEN
        FOR r IN SELECT t.tgrelid AS root, p.relid::oid AS leaf, pgshovel2.trigger_args(t.tgargs) AS args
                 FROM pg_catalog.pg_trigger t
                 CROSS JOIN LATERAL pg_catalog.pg_partition_tree(t.tgrelid) p
                 JOIN pg_catalog.pg_class c ON c.oid = p.relid
                 WHERE t.tgname LIKE 'pgshovel2\_%\_tb' AND t.tgparentid = 0 AND p.isleaf AND p.level > 0
                   AND c.relkind = 'r'
                   AND pg_catalog.strpos(before, ',' || t.tgname || ':' || t.tgrelid || ':' || p.relid::oid || ',')
                       = 0 LOOP
            PERFORM pgshovel2.emit(r.args[1], r.args[2:], r.root, r.leaf, 'I');
        END LOOP;
    END IF;
    PERFORM pgshovel2.add_partition_triggers(NULL);
END $$;

CREATE EVENT TRIGGER pgshovel2_partitions_start ON ddl_command_start
    WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION on_partition_change_start();
CREATE EVENT TRIGGER pgshovel2_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE') EXECUTE FUNCTION on_partition_change();

-- 0.2's recapture, but for a partition's capture triggers (clones of its table's): those
-- follow their table's, whose own recapture re-creates them (a clone cannot be dropped alone).
CREATE OR REPLACE FUNCTION recapture(rel oid, statement text) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tg record;
    args text[];
    live int2[];
    cols int2[];
    keys int2[];
    done int := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgparentid = 0
                   AND tgfoid = 'pgshovel2.capture()'::regprocedure) THEN
        RETURN 0;
    END IF;
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rel::regclass);
    SELECT array_agg(attnum ORDER BY attnum) INTO live FROM pg_attribute
    WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped;
    live := coalesce(live, '{}');
    FOR tg IN SELECT tgname, tgargs FROM pg_trigger
              WHERE tgrelid = rel AND tgfoid = 'pgshovel2.capture()'::regprocedure AND tgparentid = 0
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

-- 0.2's on_drop_table, but the set triggers of partitioned tables (_tb, _ta, _tp) are not
-- capture triggers, and DROP TABLE of a partition of a table a set captures (its _tp trigger
-- dropped, its table's _tb not) is refused: its rows would leave the table without a record
-- (sql_drop runs after they are gone). DETACH PARTITION relays them as deletes first.
CREATE OR REPLACE FUNCTION on_drop_table() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d record;
    q text;
BEGIN
    SELECT o.address_names[1] AS nsp, o.address_names[2] AS tbl INTO d
    FROM pg_event_trigger_dropped_objects() o
    WHERE o.object_type = 'trigger' AND o.address_names[3] LIKE 'pgshovel2\_%\_tp'
      AND NOT EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() x
                      WHERE x.object_type = 'trigger'
                        AND x.address_names[3] = left(o.address_names[3], length(o.address_names[3]) - 3) || '_tb')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgshovel2: DROP TABLE of %.%, a partition of a table a replication set captures: its rows '
            'would leave the table without a record in the set''s stream', quote_ident(d.nsp), quote_ident(d.tbl)
            USING HINT = 'Detach it first (ALTER TABLE <its table> DETACH PARTITION ...): that relays its rows as '
                         'deletes; then drop it.';
    END IF;
    FOR d IN SELECT DISTINCT o.address_names[1] AS nsp, o.address_names[2] AS tbl,
                    o.address_names[3] AS tgname
             FROM pg_event_trigger_dropped_objects() o
             WHERE o.object_type = 'trigger' AND o.address_names[3] LIKE 'pgshovel2\_%'
               AND o.address_names[3] NOT LIKE '%\_t' AND o.address_names[3] NOT LIKE '%\_tb'
               AND o.address_names[3] NOT LIKE '%\_ta' AND o.address_names[3] NOT LIKE '%\_tp' LOOP
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
