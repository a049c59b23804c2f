-- The previous release's (16bc6bb) enqueue statements, verbatim: what a producer that has not
-- been upgraded yet sends during a rolling upgrade (tests/integration/test_unknown_holds_key.py).

-- name: enqueue
-- Inserts one job through the caller's connection. A unique key that is already held by a
-- waiting (available or scheduled) or running job inserts nothing and returns no row. A job
-- due later is written 'scheduled', outside the claim index, and wakes the masters' stagers
-- (pgq_scheduled) when it is due before their next look (pgq.wakes_stagers, 0036: within 10
-- s; they look once a second anyway); a job due now wakes its queue's workers (pgq_jobs), but
-- only when a master has raised the queue's flag in pgq.queue_wakeups (it has a child asleep
-- for it): an index probe finds whether one is up, and only then pgq.take_wakeups takes every
-- raised flag no other transaction holds and notifies if it took one, so concurrent producers
-- do not each take NOTIFY's database-wide commit lock (migration 0021).
-- NOTIFY deduplicates identical payloads within a transaction.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, unique_key,
                          traceparent, tenant)
    SELECT
        %(queue)s::text,
        %(kind)s::text,
        %(args)s::jsonb,
        %(priority)s::smallint,
        t.run_at,
        CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
        %(max_attempts)s::integer,
        %(unique_key)s::text,
        %(traceparent)s::text,
        %(tenant)s::text
    FROM (
        SELECT coalesce(%(run_at)s::timestamptz,
                        now() + make_interval(secs => %(delay)s::float8)) AS run_at
    ) AS t
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
    DO NOTHING
    RETURNING id, queue, state, run_at
)
SELECT
    id,
    CASE
        WHEN NOT %(notify)s THEN NULL
        WHEN state = 'scheduled'
            THEN CASE WHEN pgq.wakes_stagers(run_at) THEN pg_notify('pgq_scheduled', '') IS NULL
                 END
        WHEN EXISTS (SELECT FROM pgq.queue_wakeups AS f
                     WHERE f.queue = inserted.queue AND f.wanted)
            THEN pgq.take_wakeups(queue)
    END
FROM inserted;

-- name: job_by_unique_key
-- The job that holds a unique key, when an enqueue with that key inserted nothing.
SELECT id
FROM pgq.jobs
WHERE unique_key = %(unique_key)s
  AND state IN ('available', 'running', 'scheduled');

-- name: jobs_by_unique_keys
-- The jobs that hold any of these unique keys (bulk enqueue's duplicates).
SELECT unique_key, id
FROM pgq.jobs
WHERE unique_key = ANY(%(unique_keys)s::text[])
  AND state IN ('available', 'running', 'scheduled');

-- name: enqueue_many
-- Inserts many jobs in one statement from parallel arrays. Duplicated unique keys insert
-- nothing. Jobs due later are written 'scheduled', like enqueue. The rows go in by unique key
-- (rows without one last, in input order; RETURNING follows the insert order, which follows
-- the ORDER BY, and the final SELECT reads the CTE in that order): two calls with the same keys
-- in different orders then wait for each other's keys in the same order instead of
-- deadlocking; the caller maps the ids back by key. Each returned row says its queue and
-- whether it waits for later and is due before the stagers' next look. With %(notify)s, the
-- queues that received due jobs are woken as in enqueue (a probe for a raised flag, then
-- pgq.take_wakeups), in this same statement (no second round trip).
-- The arguments travel as one JSON array rather than a jsonb[]: a text array would quote and
-- escape every object, which cost more than the insert itself.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, unique_key,
                          traceparent, tenant)
    SELECT
        t.queue,
        t.kind,
        t.args,
        t.priority,
        r.run_at,
        CASE WHEN r.run_at > now() THEN 'scheduled' ELSE 'available' END,
        t.max_attempts,
        t.unique_key,
        t.traceparent,
        t.tenant
    FROM ROWS FROM (
        unnest(%(queues)s::text[]),
        unnest(%(kinds)s::text[]),
        jsonb_array_elements(%(args)s::jsonb),
        unnest(%(priorities)s::smallint[]),
        unnest(%(run_ats)s::timestamptz[]),
        unnest(%(delays)s::float8[]),
        unnest(%(max_attempts)s::integer[]),
        unnest(%(unique_keys)s::text[]),
        unnest(%(traceparents)s::text[]),
        unnest(%(tenants)s::text[])
    ) WITH ORDINALITY AS t(queue, kind, args, priority, run_at, delay, max_attempts, unique_key,
                           traceparent, tenant, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(t.run_at, now() + make_interval(secs => t.delay)) AS run_at
    ) AS r
    ORDER BY t.unique_key COLLATE "C" NULLS LAST, t.ord
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
    DO NOTHING
    RETURNING id, unique_key, state, queue, run_at
)
SELECT
    id,
    unique_key,
    queue,
    -- Due later, before the stagers' next look: the caller wakes them (pgq.wakes_stagers).
    state = 'scheduled' AND pgq.wakes_stagers(run_at) AS wakes_stagers,
    (SELECT count(*) FILTER (WHERE pgq.take_wakeups(q))
     FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS d(q)
     WHERE %(notify)s
       AND EXISTS (SELECT FROM pgq.queue_wakeups AS f WHERE f.queue = d.q AND f.wanted))
FROM inserted;
