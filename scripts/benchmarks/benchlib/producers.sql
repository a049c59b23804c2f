-- Statements of the producers benchmark (scripts/benchmarks/benchlib/producers.py), named like
-- sql/*.sql (same parser).

-- name: create_copy
-- A copy of pgq.jobs (columns, defaults, constraints, indexes) for the plain INSERT.
CREATE TABLE bench_plain_jobs (LIKE pgq.jobs INCLUDING ALL);

-- name: truncate_both
TRUNCATE pgq.jobs, bench_plain_jobs;

-- name: plain_insert
-- The row enqueue writes, written directly: the floor. Due now, or %(delay)s seconds ahead.
INSERT INTO bench_plain_jobs (queue, kind, args, priority, run_at, state, max_attempts)
VALUES (%(queue)s, %(kind)s, %(args)s, 0, now() + make_interval(secs => %(delay)s),
        CASE WHEN %(delay)s > 0 THEN 'scheduled' ELSE 'available' END, 10);

-- name: plain_insert_notify
-- The same, and one pg_notify in the transaction: what NOTIFY's commit lock alone costs.
WITH i AS (
    INSERT INTO bench_plain_jobs (queue, kind, args, priority, run_at, state, max_attempts)
    VALUES (%(queue)s, %(kind)s, %(args)s, 0, now(), 'available', 10)
    RETURNING 1
)
SELECT pg_notify('pgq_jobs', %(queue)s)
FROM i;

-- name: sql_enqueue
SELECT pgq.enqueue(%(kind)s, %(args)s, %(queue)s,
                   run_at => now() + make_interval(secs => %(delay)s::float8));

-- name: enqueue_before
-- The enqueue statement before migration 0021 (sql/queries.sql then), verbatim: a NOTIFY in
-- every transaction.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, unique_key)
    SELECT
        %(queue)s::text,
        %(kind)s::text,
        %(args)s::jsonb,
        %(priority)s::smallint,
        t.run_at,
        CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
        %(max_attempts)s::integer,
        %(unique_key)s::text
    FROM (
        SELECT coalesce(%(run_at)s::timestamptz,
                        now() + make_interval(secs => %(delay)s::float8)) AS run_at
    ) AS t
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
    DO NOTHING
    RETURNING id, queue, state
)
SELECT
    id,
    CASE
        WHEN NOT %(notify)s THEN NULL
        WHEN state = 'scheduled' THEN pg_notify('pgq_scheduled', '')
        ELSE pg_notify('pgq_jobs', queue)
    END
FROM inserted;
