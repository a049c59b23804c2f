-- Named queries of the web dashboard (supervisor/web/), loaded with every sql/*.sql file.
-- Every one is bounded and served by an index: a page must render in milliseconds with millions
-- of rows in pgq.jobs, so nothing here counts a whole table. Where a figure would need that, the
-- query counts up to a cap (%(cap)s) and the page shows "10,000+".

-- name: web_queues_waiting
-- The queues that hold available jobs: a loose index scan of jobs_claim (one index probe per
-- queue, however many jobs each holds), at most %(limit)s queues.
WITH RECURSIVE q AS (
    (SELECT queue
     FROM pgq.jobs
     WHERE state = 'available'
     ORDER BY queue
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue
            FROM pgq.jobs AS j
            WHERE j.state = 'available'
              AND j.queue > q.queue
            ORDER BY j.queue
            LIMIT 1)
    FROM q
    WHERE q.queue IS NOT NULL
)
SELECT queue
FROM q
WHERE queue IS NOT NULL
LIMIT %(limit)s;

-- name: web_waiting
-- Per queue in %(queues)s: available jobs, counted over at most %(cap)s entries of jobs_claim
-- (past the cap the count is a lower bound and `capped` says so), and the oldest due job's wait.
-- The oldest due job is the first by run_at within some priority: a loose scan over the queue's
-- priorities reads one index entry per priority.
SELECT q.queue,
       least(w.seen, %(cap)s) AS due,
       w.seen > %(cap)s AS capped,
       o.oldest_wait
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT count(*) AS seen
    FROM (SELECT 1
          FROM pgq.jobs AS j
          WHERE j.state = 'available'
            AND j.queue = q.queue
          LIMIT %(cap)s + 1) AS s
) AS w
CROSS JOIN LATERAL (
    WITH RECURSIVE p AS (
        (SELECT j.priority
         FROM pgq.jobs AS j
         WHERE j.state = 'available'
           AND j.queue = q.queue
         ORDER BY j.priority DESC
         LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority
                FROM pgq.jobs AS j
                WHERE j.state = 'available'
                  AND j.queue = q.queue
                  AND j.priority < p.priority
                ORDER BY j.priority DESC
                LIMIT 1)
        FROM p
        WHERE p.priority IS NOT NULL
    )
    SELECT extract(epoch FROM now() - min(f.run_at))::float8 AS oldest_wait
    FROM (SELECT priority FROM p WHERE priority IS NOT NULL LIMIT 1000) AS pr
    CROSS JOIN LATERAL (
        SELECT j.run_at
        FROM pgq.jobs AS j
        WHERE j.state = 'available'
          AND j.queue = q.queue
          AND j.priority = pr.priority
        ORDER BY j.run_at
        LIMIT 1
    ) AS f
    WHERE f.run_at <= now()
) AS o;

-- name: web_sampled_counts
-- Jobs per state and queue for the states whose index has no queue column: each state's index
-- is read for at most %(cap)s + 1 entries (running: jobs_lease, a few per child; scheduled:
-- jobs_scheduled, soonest first; discarded and cancelled: newest first). `seen` above the cap
-- means the state holds more than the cap, and its figures are lower bounds.
SELECT state, queue, count(*) AS jobs, sum(count(*)) OVER (PARTITION BY state) AS seen
FROM (
    (SELECT 'running' AS state, queue
     FROM pgq.jobs
     WHERE state = 'running'
     LIMIT %(cap)s + 1)
    UNION ALL
    (SELECT 'scheduled', queue
     FROM pgq.jobs
     WHERE state = 'scheduled'
     ORDER BY run_at
     LIMIT %(cap)s + 1)
    UNION ALL
    (SELECT 'discarded', queue
     FROM pgq.jobs
     WHERE state = 'discarded'
     ORDER BY finished_at DESC
     LIMIT %(cap)s + 1)
    UNION ALL
    (SELECT 'cancelled', queue
     FROM pgq.jobs
     WHERE state = 'cancelled'
     ORDER BY finished_at DESC
     LIMIT %(cap)s + 1)
) AS sampled
GROUP BY state, queue;

-- name: web_throughput_since
-- Completions and discards per queue and minute since %(since)s (a minute boundary), from
-- job_history (kept only with history.enabled) through its finished_at index. The dashboard
-- counts the last hour once, then only the last few minutes at each refresh (see
-- supervisor/web/throughput.py), so a refresh costs what the last minutes wrote, not the hour.
SELECT queue, outcome, date_trunc('minute', finished_at) AS minute, count(*) AS jobs
FROM pgq.job_history
WHERE finished_at >= %(since)s
GROUP BY queue, outcome, date_trunc('minute', finished_at);

-- name: web_estimates
-- Planner statistics (what ANALYZE and autovacuum sampled): the estimated jobs per queue and
-- state, as rows x share of the queue x share of the state, for the queues and states common
-- enough to be in the statistics. Shown, marked as an estimate, where a count stopped at the cap.
SELECT q.value AS queue,
       s.value AS state,
       round(c.reltuples * q.share * s.share)::bigint AS estimate
FROM pg_class AS c
CROSS JOIN LATERAL (
    SELECT m.value, m.share
    FROM pg_stats AS p,
         unnest(p.most_common_vals::text::text[], p.most_common_freqs) AS m(value, share)
    WHERE p.schemaname = 'pgq'
      AND p.tablename = 'jobs'
      AND p.attname = 'queue'
) AS q
CROSS JOIN LATERAL (
    SELECT m.value, m.share
    FROM pg_stats AS p,
         unnest(p.most_common_vals::text::text[], p.most_common_freqs) AS m(value, share)
    WHERE p.schemaname = 'pgq'
      AND p.tablename = 'jobs'
      AND p.attname = 'state'
) AS s
WHERE c.oid = 'pgq.jobs'::regclass
  AND c.reltuples > 0;

-- name: web_queue_available
-- One page of a queue's available jobs in claim order (the jobs_claim index). The scan stops
-- after %(scan)s index entries, so a filter on kind (null means any) cannot read a whole backlog.
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'available'
      AND j.queue = %(queue)s
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(scan)s
) AS s
WHERE %(kind)s::text IS NULL OR s.kind = %(kind)s::text
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_queue_tenants
-- The queue's busiest tenants (most jobs due now), at most 10, each with its oldest due job's
-- wait and its running jobs, among the first %(scan)s due jobs in claim order (the jobs_claim
-- index): the page's cost stays flat whatever the backlog. Jobs without a tenant show as null.
WITH due AS (
    SELECT coalesce(j.tenant, '') COLLATE "C" AS tenant, j.run_at
    FROM pgq.jobs AS j
    WHERE j.state = 'available'
      AND j.queue = %(queue)s
      AND j.run_at <= now()
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(scan)s
),
busiest AS (
    SELECT tenant, count(*) AS available,
           extract(epoch FROM now() - min(run_at))::float8 AS oldest_wait
    FROM due
    GROUP BY tenant
    ORDER BY available DESC, tenant
    LIMIT 10
)
SELECT nullif(b.tenant, '') AS tenant, b.available, b.oldest_wait,
       (SELECT count(*)
        FROM pgq.jobs AS r
        WHERE r.state = 'running'
          AND r.queue = %(queue)s
          AND coalesce(r.tenant, '') COLLATE "C" = b.tenant) AS running
FROM busiest AS b
ORDER BY b.available DESC, b.tenant;

-- name: web_queue_running
-- One page of a queue's running jobs, soonest lease expiry first (the jobs_lease index).
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'running'
    ORDER BY j.lease_until, j.id
    LIMIT %(scan)s
) AS s
WHERE s.queue = %(queue)s
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_queue_discarded
-- One page of a queue's dead letters, newest first (the jobs_discarded index read backwards).
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'discarded'
    ORDER BY j.finished_at DESC, j.id DESC
    LIMIT %(scan)s
) AS s
WHERE s.queue = %(queue)s
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_queue_scheduled
-- One page of a queue's scheduled jobs, soonest first (the jobs_scheduled index).
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'scheduled'
    ORDER BY j.run_at, j.id
    LIMIT %(scan)s
) AS s
WHERE s.queue = %(queue)s
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_queue_cancelled
-- One page of a queue's cancelled jobs, newest first (the jobs_cancelled index read backwards).
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'cancelled'
    ORDER BY j.finished_at DESC, j.id DESC
    LIMIT %(scan)s
) AS s
WHERE s.queue = %(queue)s
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_queue_unknown
-- One page of a queue's jobs whose outcome is unknown, oldest first (the small jobs_unknown
-- index, by when their reconcile hook is next due).
SELECT s.*
FROM (
    SELECT j.id, j.kind, j.priority, j.run_at, j.attempts, j.max_attempts, j.locked_by,
           j.started_at, j.finished_at, j.last_error, j.created_at, j.queue
    FROM pgq.jobs AS j
    WHERE j.state = 'unknown'
    ORDER BY j.run_at, j.id
    LIMIT %(scan)s
) AS s
WHERE s.queue = %(queue)s
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
LIMIT %(limit)s
OFFSET %(offset)s;

-- name: web_dead_letters
-- One page of dead letters, newest first, after the (finished_at, id) of the previous page's
-- last row; filters are optional (null means any); %(older_than)s is in seconds. Reads the
-- jobs_discarded index backwards and stops after %(scan)s entries, so a filter that matches
-- little cannot read every dead letter.
SELECT s.id, s.kind, s.queue, s.attempts, s.max_attempts, s.finished_at, s.last_error
FROM (
    SELECT j.id, j.kind, j.queue, j.attempts, j.max_attempts, j.finished_at, j.last_error
    FROM pgq.jobs AS j
    WHERE j.state = 'discarded'
      AND (%(older_than)s::float8 IS NULL
           OR j.finished_at < now() - make_interval(secs => %(older_than)s::float8))
      AND (%(after_finished)s::timestamptz IS NULL
           OR (j.finished_at, j.id) < (%(after_finished)s::timestamptz, %(after_id)s::bigint))
    ORDER BY j.finished_at DESC, j.id DESC
    LIMIT %(scan)s
) AS s
WHERE (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
LIMIT %(limit)s;

-- name: web_job_history
-- The history rows of job %(id)s (completed, discarded, cancelled: a replayed dead letter can
-- have several), newest first, at most %(limit)s. The job_history_id index: one probe per daily
-- partition. %(since)s (the job's created_at, when it is still in pgq.jobs) skips the partitions
-- of the days before it; for a job gone from pgq.jobs every partition is probed.
SELECT outcome, attempts, created_at, started_at, finished_at, errors, queue, kind
FROM pgq.job_history
WHERE id = %(id)s
  AND finished_at >= coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY finished_at DESC
LIMIT %(limit)s;
