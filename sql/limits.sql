-- Named queries of the queue limits (YAML `limits:`, migration 0013), loaded with
-- every sql/*.sql file. The enforcement itself is in the claim statement and the pgq.limit_*
-- functions; these write the limits and read how much of them is in use.

-- name: write_limits
-- Makes pgq.queue_limits say what this supervisor's file says for the queues it serves: a
-- limit for each queue in %(queues)s (parallel arrays; a null is "no such limit"), and no row
-- for a queue in %(served)s that the file leaves unlimited. Queues other supervisors serve are
-- left alone. A row that already says the same is not rewritten. Returns each queue changed,
-- with 'set' or 'lifted'.
WITH wanted AS (
    SELECT *
    FROM unnest(
        %(queues)s::text[],
        %(concurrency)s::integer[],
        %(rate)s::float8[],
        %(burst)s::integer[],
        %(tenant_concurrency)s::integer[],
        %(tenant_rate)s::float8[],
        %(tenant_burst)s::integer[]
    ) AS w(queue, concurrency, rate, burst, tenant_concurrency, tenant_rate, tenant_burst)
),
lifted AS (
    DELETE FROM pgq.queue_limits
    WHERE queue = ANY(%(served)s::text[])
      AND queue <> ALL(%(queues)s::text[])
    RETURNING queue
),
written AS (
    INSERT INTO pgq.queue_limits AS l (queue, concurrency, rate, burst, tenant_concurrency,
                                       tenant_rate, tenant_burst, set_by)
    SELECT queue, concurrency, rate, burst, tenant_concurrency, tenant_rate, tenant_burst,
           %(set_by)s
    FROM wanted
    ON CONFLICT (queue) DO UPDATE
    SET concurrency = EXCLUDED.concurrency,
        rate = EXCLUDED.rate,
        burst = EXCLUDED.burst,
        tenant_concurrency = EXCLUDED.tenant_concurrency,
        tenant_rate = EXCLUDED.tenant_rate,
        tenant_burst = EXCLUDED.tenant_burst,
        set_by = EXCLUDED.set_by,
        updated_at = now()
    WHERE (l.concurrency, l.rate, l.burst, l.tenant_concurrency, l.tenant_rate, l.tenant_burst)
          IS DISTINCT FROM
          (EXCLUDED.concurrency, EXCLUDED.rate, EXCLUDED.burst, EXCLUDED.tenant_concurrency,
           EXCLUDED.tenant_rate, EXCLUDED.tenant_burst)
    RETURNING queue
)
SELECT queue, 'lifted' FROM lifted
UNION ALL
SELECT queue, 'set' FROM written
ORDER BY 1;

-- name: limit_use
-- Every queue limit in force, with its use now: the queue's running jobs (claimed and not yet
-- ended: the slots its concurrency counts) and the tokens in its bucket (refilled to now, on
-- the database's clock, without writing; a queue no claim has touched yet has a full bucket).
SELECT l.queue,
       l.concurrency,
       (SELECT count(*)
        FROM pgq.jobs AS j
        WHERE j.state = 'running'
          AND j.queue = l.queue) AS running,
       l.rate,
       l.burst,
       CASE WHEN l.rate IS NOT NULL THEN
           coalesce(least(l.burst::float8,
                          b.tokens + l.rate * greatest(0, extract(epoch FROM
                                                        clock_timestamp() - b.refilled_at))),
                    l.burst)
       END AS tokens,
       l.tenant_concurrency,
       l.tenant_rate,
       l.tenant_burst,
       l.set_by,
       l.updated_at
FROM pgq.queue_limits AS l
LEFT JOIN pgq.limit_buckets AS b
    ON b.queue = l.queue AND b.per = 'queue' AND b.tenant = ''
ORDER BY l.queue;

-- name: busiest_tenants
-- The ten tenants with the most jobs due now, across queues, each with its oldest due job's
-- wait (on the database's clock) and its running jobs; jobs without a tenant are the tenant ''
-- (shown as null). It reads every due job's entry of jobs_claim_tenant once, so it costs what
-- the backlog holds: status reads it once, the metrics refresh as rarely as its cost asks.
WITH due AS (
    SELECT queue,
           coalesce(tenant, '') COLLATE "C" AS tenant,
           count(*) AS available,
           extract(epoch FROM now() - min(run_at))::float8 AS oldest_wait
    FROM pgq.jobs
    WHERE state = 'available'
      AND run_at <= now()
    GROUP BY 1, 2
    ORDER BY available DESC, 1, 2
    LIMIT 10
)
SELECT d.queue,
       nullif(d.tenant, '') AS tenant,
       d.available,
       d.oldest_wait,
       (SELECT count(*)
        FROM pgq.jobs AS j
        WHERE j.state = 'running'
          AND j.queue = d.queue
          AND coalesce(j.tenant, '') COLLATE "C" = d.tenant) AS running
FROM due AS d
ORDER BY d.available DESC, d.queue, d.tenant;
