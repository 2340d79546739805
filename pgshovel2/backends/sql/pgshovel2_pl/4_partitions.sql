-- pgshovel2_pl, part 4: partitioned tables (PL/pgSQL capture sets and logical sets).
--
-- A set capturing a partitioned table T has, besides its capture (row triggers on T, cloned by
-- PostgreSQL onto its partitions; for a logical set, the slot), three statement triggers for
-- TRUNCATE named after the set's trigger name B (pgshovel2_<set>_<hash>), as the C extension's
-- (sql/capture/pgshovel2--0.2--0.3.sql):
--   B_tb  BEFORE TRUNCATE on T, B_ta AFTER TRUNCATE on T: truncate_root(<function>, <args>...)
--   B_tp  BEFORE TRUNCATE on every leaf partition of T: <function>(<args>...)
-- B_tp writes the rows a TRUNCATE of the partition removes, as the DELETEs of T they are:
-- truncate_partition (PL/pgSQL capture: D events in the set's queue) or truncate_message
-- (logical sets: logical messages the relay or our plugin turns into DELETEs). A TRUNCATE of T
-- itself is T's own TRUNCATE event: while it runs, T's OID is in the transaction-local setting
-- pgshovel2.truncating ("<oid>,<oid>,...,"), shared with the C extension, and B_tp does nothing.

-- Whether an ancestor of partition rel is being truncated (its OID in pgshovel2.truncating).
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncating_ancestor(rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_partition_ancestors(rel) a
               WHERE a.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) rel
                 AND pg_catalog.strpos(',' OPERATOR(pg_catalog.||)
                                       coalesce(pg_catalog.current_setting('pgshovel2.truncating', true), ''),
                                       ',' OPERATOR(pg_catalog.||) a.relid::pg_catalog.oid::text
                                       OPERATOR(pg_catalog.||) ',') OPERATOR(pg_catalog.>) 0)
$$;

-- The table a row trigger of queue on rel captures for: rel when the queue records a layout for
-- it, else rel's top-most ancestor that it records one for (a clone of its row trigger), else rel.
CREATE OR REPLACE FUNCTION pgshovel2_pl.captured_rel(queue text, rel oid) RETURNS oid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
SELECT coalesce((SELECT a.relid::pg_catalog.oid
                 FROM pg_catalog.pg_partition_ancestors(rel) WITH ORDINALITY a(relid, depth)
                 JOIN pgshovel2_pl.layout l ON l.queue OPERATOR(pg_catalog.=) captured_rel.queue
                                           AND l.rel OPERATOR(pg_catalog.=) a.relid::pg_catalog.oid
                 ORDER BY a.depth DESC LIMIT 1), rel)
$$;

-- B_tb and B_ta: BEFORE adds the table's OID to pgshovel2.truncating, AFTER takes it out again
-- (a later TRUNCATE of a partition in the same transaction is captured). The arguments (the
-- partitions' truncate trigger function and its arguments) are read by whoever adds B_tp to new
-- partitions (pgshovel2.backends.partitions, the C extension's event trigger).
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncate_root() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    flag text := coalesce(pg_catalog.current_setting('pgshovel2.truncating', true), '');
    me text := TG_RELID::text || ',';
    pos int;
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' THEN
        RAISE EXCEPTION 'pgshovel2_pl.truncate_root() must be a TRUNCATE ... FOR EACH STATEMENT trigger (trigger % on %)',
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

-- B_tp of a PL/pgSQL capture set (argument: its queue): one D event per row of the truncated
-- partition, exactly the event a DELETE of the row would have made: ev_data the row in the
-- layout the queue records for the partition's top-most captured ancestor (after _check, which
-- appends the S event of a changed layout first, as a first write does), read by column name,
-- ev_extra1 the table tag. One INSERT ... SELECT into the queue's current event table.
-- SECURITY DEFINER (the installer's PgQ rights and the layout records): a role that may
-- truncate the partition needs no right on the queue. Nothing when no ancestor is captured by
-- the queue any more.
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncate_partition() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    qname text := TG_ARGV[0];
    root oid;
    l pgshovel2_pl.layout;
    q record;
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_NARGS <> 1 THEN
        RAISE EXCEPTION 'pgshovel2_pl.truncate_partition() must be a BEFORE TRUNCATE ... FOR EACH STATEMENT '
            'trigger with one argument (trigger % on %)', TG_NAME, TG_RELID::regclass;
    END IF;
    IF pgshovel2_pl.truncating_ancestor(TG_RELID) THEN
        RETURN NULL;
    END IF;
    root := pgshovel2_pl.captured_rel(qname, TG_RELID);
    IF root = TG_RELID THEN
        RETURN NULL;
    END IF;
    PERFORM pgshovel2_pl._check(qname, root);
    SELECT * INTO l FROM pgshovel2_pl.layout x WHERE x.queue = qname AND x.rel = root;
    SELECT queue_data_pfx || '_' || queue_cur_table AS tbl, queue_event_seq AS seq, queue_disable_insert AS off
    INTO q FROM pgq.queue WHERE queue_name = qname;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2_pl: PgQ queue % of the truncate trigger % on % does not exist', qname, TG_NAME,
            TG_RELID::regclass;
    ELSIF q.off AND pg_catalog.current_setting('session_replication_role') <> 'replica' THEN
        RAISE EXCEPTION 'pgshovel2_pl: writing to PgQ queue % is disabled', qname;
    END IF;
    EXECUTE pg_catalog.format(
        'INSERT INTO %s (ev_id, ev_time, ev_txid, ev_type, ev_data, ev_extra1) '
        'SELECT pg_catalog.nextval(%L), pg_catalog.now(), pg_catalog.txid_current(), ''D'', %s, %L FROM ONLY %s p',
        q.tbl, q.seq, pgshovel2_pl.row_sql(root, l.cols, 'p'), l.tag, TG_RELID::regclass);
    RETURN NULL;
END $$;

-- B_tp of a logical set (arguments: its slot, its decoder ``pgshovel2`` or ``pgoutput``): the
-- truncated partition's rows as transactional logical messages with prefix
-- "pgshovel2.truncate", at most 1,000 rows or about 4 MB each, in the truncating transaction
-- (so at the TRUNCATE's place in the stream). The slot's reader turns each row into a DELETE
-- of the partition's top-most ancestor in its set (decoder pgshovel2: our plugin, in C,
-- sql/decoder/truncate.c; pgoutput: the relay, pgshovel2.relay.truncate_messages), picking
-- the set's columns by name. Content:
--   pgshovel2: <slot> \n <partition OID> \n <attnum>,... \n <row> [\n <row> ...], each row
--              pgshovel2_decoder.encode_row(<row>, '{<the attnums>}') (the partition's live columns)
--   pgoutput:  {"slot", "partition": [schema, name], "ancestors": [[schema, name], ...] (nearest
--              first), "columns": [name, ...], "rows": [[text or null, ...], ...]}, each value its
--              type's output text under the settings pgoutput's session pins (the SET clauses
--              below: pgshovel2.codec.textforms.SESSION_SETTINGS).
-- Nothing when no ancestor has the set's B_tb trigger. SECURITY DEFINER: the truncating role
-- needs no SELECT on the partition (and EXECUTE on pg_logical_emit_message may be revoked from
-- PUBLIC: the set's role, which installed this function, keeps it).
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncate_message() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET DateStyle = 'ISO' SET IntervalStyle = 'postgres'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET TimeZone = 'UTC' AS $$
DECLARE
    slot text := TG_ARGV[0];
    decoder text := TG_ARGV[1];
    attnums int2[];
    head text;
    query text;
    r record;
    batch text[] := '{}';
    size bigint := 0;
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_NARGS <> 2
       OR decoder NOT IN ('pgshovel2', 'pgoutput') THEN
        RAISE EXCEPTION 'pgshovel2_pl.truncate_message() must be a BEFORE TRUNCATE ... FOR EACH STATEMENT trigger '
            'with arguments (slot, pgshovel2 | pgoutput) (trigger % on %)', TG_NAME, TG_RELID::regclass;
    END IF;
    IF pgshovel2_pl.truncating_ancestor(TG_RELID) OR NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_partition_ancestors(TG_RELID) a
            JOIN pg_catalog.pg_trigger t ON t.tgrelid = a.relid
            WHERE a.relid::oid <> TG_RELID
              AND t.tgname = pg_catalog.left(TG_NAME, pg_catalog.length(TG_NAME) - 3) || '_tb') THEN
        RETURN NULL;
    END IF;
    SELECT pg_catalog.array_agg(a.attnum ORDER BY a.attnum) INTO attnums FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped;
    IF decoder = 'pgshovel2' THEN
        head := slot || E'\n' || TG_RELID::oid || E'\n' || pg_catalog.array_to_string(attnums, ',') || E'\n';
        query := pg_catalog.format('SELECT pgshovel2_decoder.encode_row(p, %L::pg_catalog.int2[]) AS j FROM ONLY %s p',
                                   attnums, TG_RELID::regclass);
    ELSE
        SELECT pg_catalog.json_build_object(
                   'slot', slot, 'partition', pg_catalog.json_build_array(n.nspname, c.relname),
                   'ancestors', (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(an.nspname, ac.relname)
                                                            ORDER BY a.depth)
                                 FROM pg_catalog.pg_partition_ancestors(TG_RELID) WITH ORDINALITY a(relid, depth)
                                 JOIN pg_catalog.pg_class ac ON ac.oid = a.relid
                                 JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace
                                 WHERE a.relid::oid <> TG_RELID),
                   'columns', (SELECT pg_catalog.json_agg(x.attname ORDER BY x.attnum) FROM pg_catalog.pg_attribute x
                               WHERE x.attrelid = TG_RELID AND x.attnum = ANY (attnums)))::text
        INTO head
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = TG_RELID;
        head := pg_catalog.left(head, -1) || ', "rows" : [';
        SELECT pg_catalog.format('SELECT pg_catalog.json_build_array(%s)::text AS j FROM ONLY %s p',
                                 pg_catalog.string_agg(pg_catalog.format(
                                     'CASE WHEN p.%1$I IS NULL THEN NULL ELSE pg_catalog.format(''%%s'', p.%1$I) END',
                                     x.attname), ', ' ORDER BY x.attnum), TG_RELID::regclass)
        INTO query FROM pg_catalog.pg_attribute x WHERE x.attrelid = TG_RELID AND x.attnum = ANY (attnums);
    END IF;
    FOR r IN EXECUTE query LOOP
        batch := batch || r.j;
        size := size + pg_catalog.octet_length(r.j);
        IF pg_catalog.cardinality(batch) >= 1000 OR size >= 4194304 THEN
            PERFORM pgshovel2_pl._truncate_emit(decoder, head, batch);
            batch := '{}';
            size := 0;
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(batch) > 0 THEN
        PERFORM pgshovel2_pl._truncate_emit(decoder, head, batch);
    END IF;
    RETURN NULL;
END $$;

-- One message of truncate_message: head (the content before the rows) and rows.
CREATE OR REPLACE FUNCTION pgshovel2_pl._truncate_emit(decoder text, head text, rows text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF decoder = 'pgshovel2' THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'pgshovel2.truncate',
                                                   head || pg_catalog.array_to_string(rows, E'\n'));
    ELSE
        PERFORM pg_catalog.pg_logical_emit_message(true, 'pgshovel2.truncate',
                                                   head || pg_catalog.array_to_string(rows, ',') || ']}');
    END IF;
END $$;
REVOKE ALL ON FUNCTION pgshovel2_pl._truncate_emit(text, text, text[]) FROM PUBLIC;

-- Version 4's generated row trigger functions named the table by TG_RELID, which is a
-- partition's when a partitioned table's trigger fires on it: generated again.
DO $$
DECLARE
    l pgshovel2_pl.layout;
BEGIN
    IF pg_catalog.to_regclass('pgq.queue') IS NULL THEN
        RETURN;
    END IF;
    FOR l IN SELECT x.* FROM pgshovel2_pl.layout x JOIN pg_catalog.pg_class c ON c.oid = x.rel
             WHERE c.relkind = 'p' AND EXISTS (SELECT 1 FROM pgq.queue q WHERE q.queue_name = x.queue) LOOP
        PERFORM pgshovel2_pl._generate(l);
    END LOOP;
END $$;
