-- pgq.ensure_history_partitions: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0025 before the functions had files of their own.
--
-- Supervisors starting together no longer queue on the partition lock: the first one makes the
-- partitions and the others return 0 at once. Queued starters waited under the function's 200 ms
-- lock_timeout and failed with lock_not_available whenever the first one's DDL took longer, as
-- it does on a loaded host. The history table's default partition takes any history written
-- before the first starter commits. Otherwise as in 0006.

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
    -- Another starter holds the lock and is making these very partitions: leave it to them
    -- rather than queue behind it (under load the queue outlasted the 200 ms lock_timeout).
    IF NOT pg_try_advisory_xact_lock(1885827333) THEN  -- 0x70677105
        RETURN 0;
    END IF;
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

REVOKE EXECUTE ON FUNCTION pgq.ensure_history_partitions(timestamptz, integer) FROM PUBLIC;
