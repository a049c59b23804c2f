-- The dashboard's charts (/charts and the overview's sparklines): per bucket of %(step)s
-- seconds from %(since)s to now, for queue %(queue)s and kind %(kind)s (null: any), from
-- pgq.job_history (the job_history_finished index bounds the read to the window) and the
-- jobs running now. Loaded by supervisor.web.timeseries.

-- name: chart_buckets
-- One row per bucket that saw anything: jobs completed and failed (discarded or cancelled)
-- that finished in it, the wait from enqueue to (last) start of those that started in it at
-- the median and the 95th percentile, and the jobs that started and finished in it (for the
-- running count: running at a bucket's end = running at %(since)s + starts - finishes so far).
-- Bucket 0 is the one holding %(since)s; "base" counts the jobs running at %(since)s.
WITH overlapping AS (
    SELECT h.outcome, h.created_at, h.started_at, h.finished_at
    FROM pgq.job_history AS h
    WHERE h.finished_at >= %(since)s
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
      AND (%(kind)s::text IS NULL OR h.kind = %(kind)s::text)
    UNION ALL
    SELECT 'running', j.created_at, j.started_at, NULL
    FROM pgq.jobs AS j
    WHERE j.state = 'running'
      AND j.started_at IS NOT NULL
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
),
events AS (
    -- A job that never started (cancelled while waiting) ends no run.
    SELECT floor(extract(epoch FROM o.finished_at - %(since)s) / %(step)s)::int AS bucket,
           o.outcome, NULL::float8 AS wait, 0 AS started,
           (o.started_at IS NOT NULL)::int AS finished, 0 AS base
    FROM overlapping AS o
    WHERE o.finished_at IS NOT NULL
    UNION ALL
    SELECT floor(extract(epoch FROM o.started_at - %(since)s) / %(step)s)::int,
           NULL, extract(epoch FROM o.started_at - o.created_at), 1, 0, 0
    FROM overlapping AS o
    WHERE o.started_at >= %(since)s
    UNION ALL
    SELECT 0, NULL, NULL, 0, 0, 1
    FROM overlapping AS o
    WHERE o.started_at < %(since)s
)
SELECT e.bucket,
       count(*) FILTER (WHERE e.outcome = 'completed') AS completed,
       count(*) FILTER (WHERE e.outcome IN ('discarded', 'cancelled')) AS failed,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY e.wait) AS wait_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY e.wait) AS wait_p95,
       sum(e.started) AS started,
       sum(e.finished) AS finished,
       sum(e.base) AS base
FROM events AS e
GROUP BY e.bucket
ORDER BY e.bucket;

-- name: chart_names
-- The queues and kinds the last day's history and the waiting jobs name, for the filters'
-- suggestions (at most %(limit)s of each; the newest history rows and the claim index).
SELECT 'queue' AS what, queue AS name FROM (
    SELECT DISTINCT queue FROM (
        SELECT queue FROM pgq.job_history
        WHERE finished_at >= now() - interval '1 day'
        ORDER BY finished_at DESC LIMIT 10000) AS h
    UNION
    SELECT DISTINCT queue FROM (SELECT queue FROM pgq.jobs LIMIT 10000) AS j
) AS q
UNION ALL
SELECT 'kind', kind FROM (
    SELECT DISTINCT kind FROM (
        SELECT kind FROM pgq.job_history
        WHERE finished_at >= now() - interval '1 day'
        ORDER BY finished_at DESC LIMIT 10000) AS h
    UNION
    SELECT DISTINCT kind FROM (SELECT kind FROM pgq.jobs LIMIT 10000) AS j
) AS k
ORDER BY 1, 2
LIMIT %(limit)s;
