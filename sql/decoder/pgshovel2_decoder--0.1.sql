-- pgshovel2_decoder 0.1: what the `logical` backend needs in the database
-- besides the output plugin itself (the same library, pgshovel2_decoder.so).
\echo Use "CREATE EXTENSION pgshovel2_decoder" to load this file. \quit

-- A row in the plugin's row-image form (sql/capture/encode.c): the relay's
-- snapshot reads rows through it, so snapshot rows and streamed changes match.
CREATE FUNCTION @extschema@.encode_row(record, int2[]) RETURNS text
    AS 'MODULE_PATHNAME', 'pgshovel2_decoder_encode_row' LANGUAGE C STRICT STABLE;

-- Create a slot of the plugin; returns its consistent point (the position from
-- which it decodes). The relay creates its slot on the replication protocol
-- instead (CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT), which also exports the
-- snapshot of that point for the initial copy; this one is for tools and tests.
CREATE FUNCTION @extschema@.create_slot(slot name) RETURNS pg_lsn
    LANGUAGE sql VOLATILE STRICT
    AS $$ SELECT lsn FROM pg_create_logical_replication_slot(slot, 'pgshovel2_decoder') $$;

-- Drop a slot of the plugin if it exists; true when one was dropped. Fails
-- when a relay is streaming from it (stop the relay first).
CREATE FUNCTION @extschema@.drop_slot(slot name) RETURNS boolean
    LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = slot) THEN
        RETURN false;
    END IF;
    PERFORM pg_drop_replication_slot(slot);
    RETURN true;
END $$;

-- The exported snapshot position of a slot: (consistent point the slot was
-- created at is not kept by PostgreSQL, so) the LSN the slot confirms now and
-- the oldest LSN it retains; NULL row when the slot does not exist.
CREATE FUNCTION @extschema@.slot_position(slot name,
    OUT confirmed_flush_lsn pg_lsn, OUT restart_lsn pg_lsn, OUT plugin name)
    LANGUAGE sql STABLE STRICT AS $$
    SELECT confirmed_flush_lsn, restart_lsn, plugin FROM pg_replication_slots WHERE slot_name = slot
$$;

-- A heartbeat: a non-transactional logical message the plugin passes on as an
-- 'H' record with its LSN, so an idle relay can confirm its slot up to there
-- (an idle set must not pin WAL). Returns the message's LSN.
CREATE FUNCTION @extschema@.heartbeat(slot name) RETURNS pg_lsn
    LANGUAGE sql VOLATILE STRICT
    AS $$ SELECT pg_logical_emit_message(false, 'pgshovel2.heartbeat', slot::text) $$;

-- Slot lag of every pgshovel2_decoder slot.
--   lag_bytes      WAL written since the position the relay confirmed (committed in Kafka)
--   retained_bytes WAL the slot keeps on disk (from restart_lsn)
--   lag_seconds    pg_stat_replication.flush_lag of the streaming relay (NULL when no relay
--                  streams; 0 when it is caught up)
--   wal_status, safe_wal_size: pg_replication_slots (see max_slot_wal_keep_size)
CREATE VIEW @extschema@.slot_lag AS
SELECT s.slot_name, s.database, s.active, s.active_pid,
       s.restart_lsn, s.confirmed_flush_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint AS lag_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint AS retained_bytes,
       CASE WHEN r.pid IS NULL THEN NULL
            ELSE coalesce(extract(epoch FROM r.flush_lag), 0)::float8 END AS lag_seconds,
       s.wal_status, s.safe_wal_size
FROM pg_replication_slots s
LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.plugin = 'pgshovel2_decoder';
