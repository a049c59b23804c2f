-- Schedules: staging due jobs and the scheduler's ticks.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: stage_due
-- The stager: moves up to %(limit)s scheduled jobs whose run_at has come to available, oldest
-- first, and wakes every host's idle workers of each queue it staged (one NOTIFY per queue).
-- SKIP LOCKED lets several supervisors stage at once without waiting on each other; the state
-- condition on the UPDATE keeps it a no-op for a row another stager moved first.
WITH due AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'scheduled'
      AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
staged AS (
    UPDATE pgq.jobs AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id
      AND j.state = 'scheduled'
    RETURNING j.queue
),
queues AS (
    SELECT queue, count(*) AS jobs
    FROM staged
    GROUP BY queue
)
SELECT queue, jobs, pg_notify('pgq_jobs', queue)
FROM queues;

-- name: next_scheduled
-- Seconds from now until the earliest scheduled job is due (negative when overdue), null when
-- none waits: the first entry of jobs_scheduled, measured on the database's clock.
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM pgq.jobs
WHERE state = 'scheduled';

-- name: claim_schedule_tick
-- Records that this supervisor enqueues schedule %(name)s's tick %(tick)s. Returns a row only
-- to the one caller that moved the schedule's last tick forward: a second supervisor (or a
-- restarted one) waits on the row lock, then finds the tick taken and gets nothing.
INSERT INTO pgq.schedules AS s (name, last_tick)
VALUES (%(name)s, %(tick)s)
ON CONFLICT (name) DO UPDATE
SET last_tick = EXCLUDED.last_tick,
    updated_at = now()
WHERE s.last_tick < EXCLUDED.last_tick
RETURNING name;

-- name: database_clock
-- The database's clock, the one every host shares: schedule ticks and purge cutoffs are read
-- from it, not from the host's (a host whose clock runs ahead would take ticks early).
SELECT clock_timestamp();

-- name: schedule_lock_timeout
-- The scheduler's transaction waits at most this long for a schedule's row: the holder is
-- another supervisor enqueueing the same tick, and the master's loop must not hang on it.
-- set_config(..., true) is SET LOCAL: it ends with the transaction.
SELECT set_config('lock_timeout', '200ms', true);

-- name: schedule_last_tick
-- The last tick schedule %(name)s enqueued (or recorded as passed), if any.
SELECT last_tick
FROM pgq.schedules
WHERE name = %(name)s;

-- name: record_schedule_job
-- The job a schedule's last tick enqueued, for status.
UPDATE pgq.schedules
SET last_job_id = %(job_id)s
WHERE name = %(name)s;

-- name: list_schedules
-- Every schedule's last tick and job, for status.
SELECT name, last_tick, last_job_id
FROM pgq.schedules
ORDER BY name;
