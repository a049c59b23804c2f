-- History and the operator's reads: finished jobs, dead letters, one job, the queues' figures.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: queue_stats
-- Per queue: jobs due now, scheduled for later, running, dead, cancelled; age of the oldest due
-- job; whether the queue is paused (a paused queue with no jobs is listed too); jobs whose
-- outcome is unknown (last, so readers of the earlier columns are unchanged); then workflow
-- steps waiting for their parents (0050).
SELECT
    coalesce(j.queue, p.queue) AS queue,
    coalesce(j.available, 0),
    coalesce(j.scheduled, 0),
    coalesce(j.running, 0),
    coalesce(j.discarded, 0),
    coalesce(j.cancelled, 0),
    coalesce(j.oldest_ready_age, 0)::float8,
    p.queue IS NOT NULL AS paused,
    coalesce(j.unknown, 0),
    coalesce(j.waiting, 0)
FROM (
    SELECT
        queue,
        count(*) FILTER (WHERE state = 'available' AND run_at <= now()) AS available,
        count(*) FILTER (WHERE state = 'scheduled'
                            OR (state = 'available' AND run_at > now())) AS scheduled,
        count(*) FILTER (WHERE state = 'running') AS running,
        count(*) FILTER (WHERE state = 'discarded') AS discarded,
        count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
        count(*) FILTER (WHERE state = 'unknown') AS unknown,
        count(*) FILTER (WHERE state = 'waiting') AS waiting,
        extract(epoch FROM now() - min(run_at)
            FILTER (WHERE state = 'available' AND run_at <= now())) AS oldest_ready_age
    FROM pgq.jobs
    GROUP BY queue
) AS j
FULL JOIN pgq.queue_pauses AS p ON p.queue = j.queue
ORDER BY 1;

-- name: history_throughput
-- Jobs finished per queue and outcome over the last %(seconds)s seconds (history kept only).
SELECT queue, outcome, count(*) AS jobs
FROM pgq.job_history
WHERE finished_at > now() - make_interval(secs => %(seconds)s::float8)
GROUP BY queue, outcome
ORDER BY queue, outcome;

-- name: clock
-- The database's time: operator commands measure ages and cutoffs on the server's clock, so a
-- skewed clock on the operator's machine cannot shift what `--older-than 1d` selects.
SELECT now();

-- name: list_discarded
-- Dead letters, newest first, up to %(limit)s; every filter is optional (null means any).
-- Reads the jobs_discarded index backwards.
SELECT id, kind, queue, attempts, max_attempts, finished_at, unique_key, last_error
FROM pgq.jobs
WHERE state = 'discarded'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR finished_at > %(finished_after)s::timestamptz)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: count_discarded
-- How many dead letters match the same filters as list_discarded (when a listing is cut short).
SELECT count(*)
FROM pgq.jobs
WHERE state = 'discarded'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR finished_at > %(finished_after)s::timestamptz);

-- name: job_by_id
-- Everything about one job, whatever its state (`dlq show`).
SELECT id, queue, kind, state, args, priority, attempts, max_attempts, unique_key, last_error,
       created_at, run_at, started_at, finished_at, locked_by
FROM pgq.jobs
WHERE id = %(id)s;

-- name: list_jobs
-- Jobs in any state, newest first, up to %(limit)s; every filter is optional (null means any);
-- %(args)s is a JSON object the job's arguments contain.
SELECT id, queue, kind, state, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, locked_by, cancel_requested_at, last_error
FROM pgq.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_detail
-- Everything about one job, with the supervisor, pool, slot and pid of the worker running it
-- (from the registry's last heartbeat) when it runs, and every error kept.
SELECT j.id, j.queue, j.kind, j.state, j.args, j.priority, j.attempts, j.max_attempts,
       j.unique_key, j.last_error, j.created_at, j.run_at, j.started_at, j.finished_at,
       j.locked_by, j.lease_until, j.cancel_requested_at,
       s.host, w.pool, w.slot, w.pid, j.errors
FROM pgq.jobs AS j
LEFT JOIN pgq.workers AS w ON w.worker_id = j.locked_by
LEFT JOIN pgq.supervisors AS s ON s.id = w.supervisor_id
WHERE j.id = %(id)s;

-- name: due_queues
-- The queues that hold jobs due now and are not paused (supervisor.testing.drain).
SELECT DISTINCT queue
FROM pgq.jobs
WHERE state = 'available'
  AND run_at <= now()
  AND queue NOT IN (SELECT queue FROM pgq.queue_pauses)
ORDER BY queue;

-- name: cli_job_history
-- The history rows of job %(id)s (completed, discarded, cancelled: a replayed dead letter can
-- have several), newest first, at most %(limit)s: all that remains of a completed job. The
-- job_history_id index, one probe per daily partition.
SELECT outcome, attempts, created_at, started_at, finished_at, errors, queue, kind
FROM pgq.job_history
WHERE id = %(id)s
ORDER BY finished_at DESC
LIMIT %(limit)s;

-- name: job_aging
-- What priority aging (sql/claim/aging.sql) makes of a waiting job, for `jobs show`: its
-- priority, run_at, and the highest priority waiting in its tenant of its queue (the cap). No
-- row unless the job is available (due and waiting to be claimed).
SELECT j.priority, j.run_at,
       (SELECT t.priority
        FROM pgq.jobs AS t
        WHERE t.state = 'available'
          AND t.queue = j.queue
          AND coalesce(t.tenant, '') COLLATE "C" = coalesce(j.tenant, '') COLLATE "C"
        ORDER BY t.priority DESC
        LIMIT 1) AS top
FROM pgq.jobs AS j
WHERE j.id = %(id)s
  AND j.state = 'available';

-- name: job_order
-- The order key of job %(id)s (0066) for `jobs show`: its key, the job that holds the key now
-- (pgq.order_keys.head_id: the one a follower waits for) with its state, and how many of the
-- key's jobs have not ended. A workflow step whose parents have not all ended has its key on
-- its step row only (0068: it joins the key once released): the last column says so. No row for
-- a job without a key.
SELECT coalesce(j.order_key, s.order_key), j.state, o.head_id, h.state AS head_state,
       o.unfinished, j.order_key IS NULL AS for_parents
FROM pgq.jobs AS j
LEFT JOIN pgq.workflow_steps AS s ON s.job_id = j.id AND j.order_key IS NULL
LEFT JOIN pgq.order_keys AS o ON o.queue = j.queue AND o.key = coalesce(j.order_key, s.order_key)
LEFT JOIN pgq.jobs AS h ON h.id = o.head_id
WHERE j.id = %(id)s
  AND coalesce(j.order_key, s.order_key) IS NOT NULL;
