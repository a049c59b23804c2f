-- Optional history of finished jobs: one compact row per completion or discard, written in
-- the same statement that deletes or discards the job. Partitioned by day on finished_at so the
-- purge drops whole partitions instead of deleting rows.

CREATE TABLE pgq.job_history (
    id           bigint      NOT NULL,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    outcome      text        NOT NULL,
    attempts     integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL,
    CONSTRAINT job_history_outcome_check CHECK (outcome IN ('completed', 'discarded'))
) PARTITION BY RANGE (finished_at);

-- Catches rows whose day has no partition yet (the supervisor creates them ahead of time).
CREATE TABLE pgq.job_history_default PARTITION OF pgq.job_history DEFAULT;

CREATE INDEX job_history_finished ON pgq.job_history (finished_at);

-- Creates the daily partitions from the day of `since` through `days_ahead` days later.
-- Rows already sitting in the default partition for a new day are moved into it, because
-- PostgreSQL refuses to attach a partition whose range the default partition already holds.
CREATE FUNCTION pgq.ensure_history_partitions(since timestamptz, days_ahead integer)
RETURNS integer
LANGUAGE plpgsql
-- Runs with the owner's rights, so a least-privilege worker role can keep partitions coming.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    day      date;
    part     text;
    created  integer := 0;
BEGIN
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

-- Drops the daily partitions whose whole day ended before `older_than`; returns how many.
CREATE FUNCTION pgq.drop_history_partitions(older_than timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part     record;
    dropped  integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE i.inhparent = 'pgq.job_history'::regclass
          AND n.nspname = 'pgq'
          AND c.relname ~ '^job_history_[0-9]{8}$'
          AND (to_date(substring(c.relname from 13), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
              <= older_than
    LOOP
        EXECUTE format('DROP TABLE pgq.%I', part.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;
