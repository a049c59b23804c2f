-- The dashboard's /jobs page: jobs across queues and states, filtered, and the actions on
-- everything a filter matches. Loaded by supervisor.web.finder. Every filter is optional (null
-- means any); %(args)s is a JSON object the job's arguments must contain (jsonb @>).
--
-- Bounded two ways: each read walks the primary key newest first and looks at no more than
-- %(scan)s jobs (the page says so when it stopped there), and the transaction carries a
-- statement_timeout (web_bound). With the optional index on args (sql/optional/
-- jobs_args_index.sql, built CONCURRENTLY by the operator) a search by arguments reads that
-- index instead (web_find_jobs_by_args) and has no scan limit, only the timeout.

-- name: web_bound
-- The time any one statement of a /jobs read or slice may take.
SET LOCAL statement_timeout = '3s';

-- name: web_find_jobs
-- One page of jobs, newest first, below id %(before)s (the previous page's last id).
SELECT s.id, s.queue, s.kind, s.state, s.priority, s.attempts, s.max_attempts, s.run_at,
       s.created_at, s.finished_at, s.last_error, s.args, s.tenant
FROM (
    SELECT j.*
    FROM pgq.jobs AS j
    WHERE (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
    ORDER BY j.id DESC
    LIMIT %(scan)s
) AS s
WHERE (%(state)s::text IS NULL OR s.state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR s.kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s::text)
  AND (%(args)s::jsonb IS NULL OR s.args @> %(args)s::jsonb)
ORDER BY s.id DESC
LIMIT %(limit)s;

-- name: web_find_jobs_by_args
-- The same page when the jobs_args index exists: the planner reads it for args @> %(args)s
-- (a bitmap scan), then sorts the matches by id.
SELECT j.id, j.queue, j.kind, j.state, j.priority, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.finished_at, j.last_error, j.args, j.tenant
FROM pgq.jobs AS j
WHERE j.args @> %(args)s::jsonb
  AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: web_scan_floor
-- Where a dry run stops: the lowest id among the %(scan)s newest jobs at or below %(top)s, and
-- how many it saw (%(scan)s: older jobs were left out of the count).
SELECT coalesce(min(s.id), 0) AS floor, count(*) AS seen
FROM (SELECT j.id FROM pgq.jobs AS j WHERE j.id <= %(top)s::bigint
      ORDER BY j.id DESC LIMIT %(scan)s) AS s;

-- name: web_top_id
-- The newest job's id: a dry run and its action cover the jobs at or below it only, so jobs
-- enqueued after the count are never touched.
SELECT coalesce(max(id), 0) AS top FROM pgq.jobs;

-- name: web_count_jobs
-- The dry run of an action on everything a filter matches: the jobs between %(floor)s and
-- %(top)s that match and are in one of %(states)s, the states the action applies to (a range
-- of the primary key: at most the scan limit's rows read).
SELECT count(*) AS jobs
FROM pgq.jobs AS j
WHERE j.id BETWEEN %(floor)s::bigint AND %(top)s::bigint
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND j.state = ANY (%(states)s::text[])
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  AND (%(args)s::jsonb IS NULL OR j.args @> %(args)s::jsonb);

-- name: web_slice_ids
-- The next slice of a bulk action: the ids between %(floor)s and %(top)s, below %(below)s (the
-- last slice's lowest id), that still match, highest first, at most %(limit)s. Sent unlocked
-- for a cancel (cancel_jobs, control.sql, locks them itself, an ordered job's key's row before
-- the job's, the order every ending takes them in: a slice holding a follower's row while the
-- cancel waits for its key would deadlock with the ending of the key's head, which holds the key
-- and releases that follower; two cancels of one job are harmless, the second finds it
-- cancelled); for every other action with FOR UPDATE SKIP LOCKED after it (supervisor/queue/
-- bulk.py), so that two slices (two browser tabs) never act on one job at once.
SELECT j.id
FROM pgq.jobs AS j
WHERE j.id BETWEEN %(floor)s::bigint AND %(top)s::bigint
  AND (%(below)s::bigint IS NULL OR j.id < %(below)s::bigint)
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND j.state = ANY (%(states)s::text[])
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  AND (%(args)s::jsonb IS NULL OR j.args @> %(args)s::jsonb)
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: web_has_args_index
-- Whether the operator built the optional index on args (sql/optional/jobs_args_index.sql).
SELECT EXISTS (SELECT 1 FROM pg_indexes
               WHERE schemaname = 'pgq' AND tablename = 'jobs' AND indexname = 'jobs_args')
           AS args_index;
