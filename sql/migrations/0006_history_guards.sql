-- The history partition functions, hardened (issue 11). They run with their owner's rights
-- (SECURITY DEFINER), so what a caller may ask of them is bounded here, and only roles granted
-- EXECUTE (the owner, and pgq_worker through sql/roles/worker_role.sql) may call them.

-- Creates the daily partitions from the day of `since` through `days_ahead` days later.
-- `since` must be within two days of now and `days_ahead` at most 31: a caller cannot make the
-- owner create thousands of tables. Supervisors starting at the same moment queue on a
-- transaction advisory lock (key 0x70677105, supervisor/queue/locks.py) instead of racing to
-- create the same table. Attaching a partition locks the history table: it waits at most
-- 200 ms for that (lock_not_available, 55P03), and is tried again later.
CREATE OR REPLACE FUNCTION pgq.ensure_history_partitions(since timestamptz, days_ahead integer)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    day      date;
    part     text;
    created  integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 31 THEN
        RAISE EXCEPTION 'pgq.ensure_history_partitions: days_ahead must be 0 to 31, not %',
            coalesce(days_ahead::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF since IS NULL OR since < now() - interval '2 days' OR since > now() + interval '2 days' THEN
        RAISE EXCEPTION 'pgq.ensure_history_partitions: since must be within two days of now, not %',
            coalesce(since::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(1885827333);  -- 0x70677105
    FOR day IN
        SELECT generate_series((since AT TIME ZONE 'UTC')::date,
                               (since AT TIME ZONE 'UTC')::date + days_ahead, interval '1 day')::date
    LOOP
        part := 'job_history_' || to_char(day, 'YYYYMMDD');
        CONTINUE WHEN to_regclass('pgq.' || part) IS NOT NULL;
        EXECUTE format(
            'CREATE TABLE pgq.%I (LIKE pgq.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
            part);
        EXECUTE format(
            'WITH moved AS (DELETE FROM pgq.job_history_default
                             WHERE finished_at >= %L::timestamp AT TIME ZONE ''UTC''
                               AND finished_at < %L::timestamp AT TIME ZONE ''UTC''
                             RETURNING *)
             INSERT INTO pgq.%I SELECT * FROM moved',
            day, day + 1, part);
        EXECUTE format(
            'ALTER TABLE pgq.job_history ATTACH PARTITION pgq.%I
                 FOR VALUES FROM (%L) TO (%L)',
            part,
            (day::timestamp AT TIME ZONE 'UTC'),
            ((day + 1)::timestamp AT TIME ZONE 'UTC'));
        created := created + 1;
    END LOOP;
    RETURN created;
END;
$$;

-- Drops the oldest daily partition whose whole day ended before `older_than`: one per call,
-- so the exclusive lock DROP takes on pgq.job_history (which every completion writing history
-- needs) is held for one table, not all of them. It waits at most 200 ms for that lock and
-- fails with lock_not_available (55P03) instead of queueing completions behind it; the purge
-- tries again later. Returns how many it dropped (0 or 1).
-- pgq.drop_history_partitions: its definition from here on is sql/functions/drop_history_partitions.sql (applied after the migrations).

REVOKE EXECUTE ON FUNCTION pgq.ensure_history_partitions(timestamptz, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgq.drop_history_partitions(timestamptz) FROM PUBLIC;
