-- pgshovel2_pl, part 4: partitioned tables (PL/pgSQL capture sets and logical sets).
--
-- A set capturing a partitioned table T has, besides its capture (row triggers on T, cloned by
-- PostgreSQL onto its partitions; for a logical set, the slot), three statement triggers for
-- TRUNCATE named after the set's trigger name B (pgshovel2_<set>_<hash>), as the C extension's
-- (sql/capture/pgshovel2--0.2--0.3.sql):
--   B_tb  BEFORE TRUNCATE on T, B_ta AFTER TRUNCATE on T: truncate_root(<function>, <args>...)
--   B_tp  BEFORE TRUNCATE on every leaf partition of T: <function>(<args>..., <T's OID>)
-- B_tp writes the rows a TRUNCATE of the partition removes, as the DELETEs of T they are:
-- truncate_partition (PL/pgSQL capture: D events in the set's queue, emit_rows) or
-- truncate_message (logical sets: logical messages the relay or our plugin turns into DELETEs,
-- emit_messages). A TRUNCATE of T itself is T's own TRUNCATE event: while it runs, T's OID is
-- in the transaction-local setting pgshovel2.truncating ("<oid>,<oid>,...,"), shared with the C
-- extension, and B_tp does nothing. emit_rows and emit_messages also relay the rows of a
-- partition ATTACHed or DETACHed, called by the C extension's event trigger where it is
-- installed.

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

-- The rows of leaf (ONLY leaf; every leaf partition of it when it is partitioned) as op events
-- ('D' or 'I') of root in queue, exactly the events a DELETE or an INSERT of each row would
-- have made: ev_data the row in the layout the queue records for root (after _check, which
-- appends the S event of a changed layout first, as a first write does), read by column name,
-- ev_extra1 the table tag. One INSERT ... SELECT into the queue's current event table per leaf.
-- Returns the number of events; 0 when the queue records no layout of root. SECURITY DEFINER
-- (the installer's PgQ rights and the layout records); not executable by PUBLIC: it writes any
-- rows it is given.
CREATE OR REPLACE FUNCTION pgshovel2_pl.emit_rows(qname text, root oid, leaf oid, op text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l pgshovel2_pl.layout;
    q record;
    part oid;
    n bigint;
    total bigint := 0;
BEGIN
    IF op NOT IN ('D', 'I') THEN
        RAISE EXCEPTION 'pgshovel2_pl.emit_rows(): op must be D or I, not %', op;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgshovel2_pl.layout x WHERE x.queue = qname AND x.rel = root) THEN
        RETURN 0;
    END IF;
    PERFORM pgshovel2_pl._check(qname, root);
    SELECT * INTO l FROM pgshovel2_pl.layout x WHERE x.queue = qname AND x.rel = root;
    SELECT queue_data_pfx || '_' || queue_cur_table AS tbl, queue_event_seq AS seq, queue_disable_insert AS off
    INTO q FROM pgq.queue WHERE queue_name = qname;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshovel2_pl: PgQ queue % (of the partitions of %) does not exist', qname, root::regclass;
    ELSIF q.off AND pg_catalog.current_setting('session_replication_role') <> 'replica' THEN
        RAISE EXCEPTION 'pgshovel2_pl: writing to PgQ queue % is disabled', qname;
    END IF;
    FOR part IN SELECT c.oid FROM pg_catalog.pg_class c WHERE c.oid = leaf AND c.relkind = 'r'
                UNION SELECT p.relid FROM pg_catalog.pg_partition_tree(leaf) p JOIN pg_catalog.pg_class c ON c.oid = p.relid
                WHERE p.isleaf AND c.relkind = 'r' LOOP
        EXECUTE pg_catalog.format(
            'INSERT INTO %s (ev_id, ev_time, ev_txid, ev_type, ev_data, ev_extra1) '
            'SELECT pg_catalog.nextval(%L), pg_catalog.now(), pg_catalog.txid_current(), %L, %s, %L FROM ONLY %s p',
            q.tbl, q.seq, op, pgshovel2_pl.row_sql(root, l.cols, 'p'), l.tag, part::regclass);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;
REVOKE ALL ON FUNCTION pgshovel2_pl.emit_rows(text, oid, oid, text) FROM PUBLIC;

-- B_tp of a PL/pgSQL capture set (arguments: its queue, the OID of its table T): the rows a
-- TRUNCATE of the partition removes, as D events of T (emit_rows). SECURITY DEFINER: a role
-- that may truncate the partition needs no right on the queue. Nothing while T itself is
-- truncated, and nothing when the partition is no longer T's (detached).
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncate_partition() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_NARGS <> 2 THEN
        RAISE EXCEPTION 'pgshovel2_pl.truncate_partition() must be a BEFORE TRUNCATE ... FOR EACH STATEMENT '
            'trigger with two arguments (trigger % on %)', TG_NAME, TG_RELID::regclass;
    END IF;
    IF pgshovel2_pl.truncating_ancestor(TG_RELID) OR NOT pgshovel2_pl._is_ancestor(TG_ARGV[1]::oid, TG_RELID) THEN
        RETURN NULL;
    END IF;
    PERFORM pgshovel2_pl.emit_rows(TG_ARGV[0], TG_ARGV[1]::oid, TG_RELID, 'D');
    RETURN NULL;
END $$;

-- Whether root is an ancestor of leaf (not leaf itself).
CREATE OR REPLACE FUNCTION pgshovel2_pl._is_ancestor(root oid, leaf oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_partition_ancestors(leaf) a
               WHERE a.relid::pg_catalog.oid OPERATOR(pg_catalog.=) root
                 AND a.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) leaf)
$$;

-- The rows of leaf (every leaf partition of it when it is partitioned) as op ('D' or 'I')
-- changes of root for the logical set of slot read through decoder (``pgshovel2``: our plugin,
-- ``pgoutput``): transactional logical messages with prefix "pgshovel2.rows", at most 1,000
-- rows or about 4 MB each, in the caller's transaction (so at its place in the stream). The
-- slot's reader turns each row into an INSERT or DELETE of root (our plugin, in C:
-- sql/decoder/rows.c; pgoutput: the relay, pgshovel2.relay.logical.pgoutput.rows), picking root's
-- columns by name. Content:
--   pgshovel2: <slot> \n <op> \n <root OID> \n <leaf OID> \n <attnum>,... \n <row> [\n <row> ...],
--              each row pgshovel2_decoder.encode_row(<row>, '{<the attnums>}') (the leaf's live
--              columns)
--   pgoutput:  {"slot", "op", "table": [schema, name] (root), "partition": [schema, name],
--              "columns": [name, ...], "rows": [[text or null, ...], ...]}, each value its type's
--              output text under the settings pgoutput's session pins (the SET clauses below:
--              pgshovel2.codec.textforms.SESSION_SETTINGS).
-- Returns the number of rows. SECURITY DEFINER: the caller needs no SELECT on the partition
-- (and EXECUTE on pg_logical_emit_message may be revoked from PUBLIC: the installer keeps it);
-- not executable by PUBLIC: it writes any rows it is given.
CREATE OR REPLACE FUNCTION pgshovel2_pl.emit_messages(slot text, decoder text, root oid, leaf oid, op text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET DateStyle = 'ISO' SET IntervalStyle = 'postgres'
SET extra_float_digits = 3 SET bytea_output = 'hex' SET TimeZone = 'UTC' AS $$
DECLARE
    part oid;
    attnums int2[];
    head text;
    query text;
    r record;
    batch text[];
    size bigint;
    total bigint := 0;
BEGIN
    IF decoder NOT IN ('pgshovel2', 'pgoutput') OR op NOT IN ('D', 'I') THEN
        RAISE EXCEPTION 'pgshovel2_pl.emit_messages(): decoder must be pgshovel2 or pgoutput (not %), op D or I '
            '(not %)', decoder, op;
    END IF;
    FOR part IN SELECT c.oid FROM pg_catalog.pg_class c WHERE c.oid = leaf AND c.relkind = 'r'
                UNION SELECT p.relid FROM pg_catalog.pg_partition_tree(leaf) p JOIN pg_catalog.pg_class c ON c.oid = p.relid
                WHERE p.isleaf AND c.relkind = 'r' LOOP
        SELECT pg_catalog.array_agg(a.attnum ORDER BY a.attnum) INTO attnums FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = part AND a.attnum > 0 AND NOT a.attisdropped;
        IF decoder = 'pgshovel2' THEN
            head := slot || E'\n' || op || E'\n' || root || E'\n' || part || E'\n'
                    || pg_catalog.array_to_string(attnums, ',') || E'\n';
            query := pg_catalog.format('SELECT pgshovel2_decoder.encode_row(p, %L::pg_catalog.int2[]) AS j '
                                       'FROM ONLY %s p', attnums, part::regclass);
        ELSE
            SELECT pg_catalog.json_build_object(
                       'slot', slot, 'op', op,
                       'table', (SELECT pg_catalog.json_build_array(n.nspname, c.relname) FROM pg_catalog.pg_class c
                                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = root),
                       'partition', (SELECT pg_catalog.json_build_array(n.nspname, c.relname) FROM pg_catalog.pg_class c
                                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = part),
                       'columns', (SELECT pg_catalog.json_agg(x.attname ORDER BY x.attnum) FROM pg_catalog.pg_attribute x
                                   WHERE x.attrelid = part AND x.attnum = ANY (attnums)))::text
            INTO head;
            head := pg_catalog.left(head, -1) || ', "rows" : [';
            SELECT pg_catalog.format('SELECT pg_catalog.json_build_array(%s)::text AS j FROM ONLY %s p',
                                     pg_catalog.string_agg(pg_catalog.format(
                                         'CASE WHEN p.%1$I IS NULL THEN NULL ELSE pg_catalog.format(''%%s'', p.%1$I) END',
                                         x.attname), ', ' ORDER BY x.attnum), part::regclass)
            INTO query FROM pg_catalog.pg_attribute x WHERE x.attrelid = part AND x.attnum = ANY (attnums);
        END IF;
        batch := '{}';
        size := 0;
        FOR r IN EXECUTE query LOOP
            batch := batch || r.j;
            size := size + pg_catalog.octet_length(r.j);
            total := total + 1;
            IF pg_catalog.cardinality(batch) >= 1000 OR size >= 4194304 THEN
                PERFORM pgshovel2_pl._rows_message(decoder, head, batch);
                batch := '{}';
                size := 0;
            END IF;
        END LOOP;
        IF pg_catalog.cardinality(batch) > 0 THEN
            PERFORM pgshovel2_pl._rows_message(decoder, head, batch);
        END IF;
    END LOOP;
    RETURN total;
END $$;
REVOKE ALL ON FUNCTION pgshovel2_pl.emit_messages(text, text, oid, oid, text) FROM PUBLIC;

-- One message of emit_messages: head (the content before the rows) and rows.
CREATE OR REPLACE FUNCTION pgshovel2_pl._rows_message(decoder text, head text, rows text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF decoder = 'pgshovel2' THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'pgshovel2.rows', head || pg_catalog.array_to_string(rows, E'\n'));
    ELSE
        PERFORM pg_catalog.pg_logical_emit_message(true, 'pgshovel2.rows',
                                                   head || pg_catalog.array_to_string(rows, ',') || ']}');
    END IF;
END $$;
REVOKE ALL ON FUNCTION pgshovel2_pl._rows_message(text, text, text[]) FROM PUBLIC;

-- B_tp of a logical set (arguments: its slot, its decoder ``pgshovel2`` or ``pgoutput``, the OID
-- of its table T): the rows a TRUNCATE of the partition removes, as deletes of T
-- (emit_messages). SECURITY DEFINER (emit_messages' rights). Nothing while T itself is
-- truncated, and nothing when the partition is no longer T's (detached).
CREATE OR REPLACE FUNCTION pgshovel2_pl.truncate_message() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP <> 'TRUNCATE' OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'BEFORE' OR TG_NARGS <> 3 THEN
        RAISE EXCEPTION 'pgshovel2_pl.truncate_message() must be a BEFORE TRUNCATE ... FOR EACH STATEMENT trigger '
            'with arguments (slot, pgshovel2 | pgoutput, table OID) (trigger % on %)', TG_NAME, TG_RELID::regclass;
    END IF;
    IF pgshovel2_pl.truncating_ancestor(TG_RELID) OR NOT pgshovel2_pl._is_ancestor(TG_ARGV[2]::oid, TG_RELID) THEN
        RETURN NULL;
    END IF;
    PERFORM pgshovel2_pl.emit_messages(TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]::oid, TG_RELID, 'D');
    RETURN NULL;
END $$;

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
