-- pgq.drop_history_partitions: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0006 before the functions had files of their own.
--
-- Drops the oldest daily partition whose whole day ended before `older_than`: one per call,
-- so the exclusive lock DROP takes on pgq.job_history (which every completion writing history
-- needs) is held for one table, not all of them. It waits at most 200 ms for that lock and
-- fails with lock_not_available (55P03) instead of queueing completions behind it; the purge
-- tries again later. Returns how many it dropped (0 or 1).

CREATE OR REPLACE FUNCTION pgq.drop_history_partitions(older_than timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    part  text;
BEGIN
    SELECT c.relname INTO part
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE i.inhparent = 'pgq.job_history'::regclass
      AND n.nspname = 'pgq'
      AND c.relname ~ '^job_history_[0-9]{8}$'
      AND (to_date(substring(c.relname from 13), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
          <= older_than
    ORDER BY c.relname
    LIMIT 1;
    IF part IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('DROP TABLE pgq.%I', part);
    RETURN 1;
END;
$$;

REVOKE EXECUTE ON FUNCTION pgq.drop_history_partitions(timestamptz) FROM PUBLIC;
