-- Named queries of scripts/demo/demo.py, in the format of sql/*.sql (same parser).
-- The demo counts only its own jobs (%(ids)s): a database kept from earlier runs, or one shared
-- with other work, may hold other jobs in the same queues.

-- name: schema_ready
-- Whether the supervisor's migrations got as far as the registry (the last table the demo
-- reads before it enqueues).
SELECT to_regclass('pgq.supervisors') IS NOT NULL;

-- name: supervisor_registered
-- Whether the supervisor with this pid on this host has started its loop: the master registers
-- itself on its first turn, after migrating and right before it forks its children.
SELECT EXISTS (
    SELECT 1
    FROM pgq.supervisors
    WHERE pid = %(pid)s
      AND host = %(host)s
);

-- name: waiting_elsewhere
-- Jobs of other runs waiting (now or for later) or running in the demo's queues: the supervisor
-- runs them too.
SELECT count(*)
FROM pgq.jobs
WHERE queue = ANY(%(queues)s::text[])
  AND state IN ('available', 'scheduled', 'running');

-- name: database_now
-- The database's clock, which stamps created_at and finished_at.
SELECT now();

-- name: job_state
-- The state of one job still in pgq.jobs (the archive job; no row once it completed).
SELECT state
FROM pgq.jobs
WHERE id = %(id)s;

-- name: jobs_in_table
-- The demo's jobs still in pgq.jobs, per queue and state: waiting, running and dead (completed
-- jobs are deleted). Failed attempts so far: every attempt spent by a waiting job failed (a
-- snooze or a release gives its attempt back); a running or dead job's last attempt is the
-- current one or the one that gave up, not a retried failure. Only dead jobs have finished_at.
SELECT
    queue,
    state,
    count(*) AS jobs,
    coalesce(sum(CASE
                     WHEN state IN ('available', 'scheduled') THEN attempts
                     ELSE greatest(attempts - 1, 0)
                 END),
             0) AS failed,
    max(finished_at) AS last_finished
FROM pgq.jobs
WHERE id = ANY(%(ids)s::bigint[])
GROUP BY queue, state;

-- name: jobs_completed
-- The demo's completed jobs per queue, from the history the supervisor keeps: how many, their
-- failed attempts before the one that succeeded, how many finished in the last %(window)s
-- seconds, and when the last one finished.
SELECT
    queue,
    count(*) AS jobs,
    coalesce(sum(attempts - 1), 0) AS failed,
    count(*) FILTER (
        WHERE finished_at > now() - make_interval(secs => %(window)s::float8)
    ) AS recent,
    max(finished_at) AS last_finished
FROM pgq.job_history
WHERE id = ANY(%(ids)s::bigint[])
  AND outcome = 'completed'
GROUP BY queue;

-- name: dead_letters
-- The demo's dead letters, oldest first, with the error that ended each one.
SELECT id, queue, kind, attempts, args, last_error
FROM pgq.jobs
WHERE id = ANY(%(ids)s::bigint[])
  AND state = 'discarded'
ORDER BY finished_at, id
LIMIT %(limit)s;

-- name: withdraw
-- Deletes the demo's jobs that have not started, when it stops early (Ctrl-C, timeout): they
-- would otherwise run at the next start, their webhooks aimed at a receiver long gone. A retry
-- waiting for its backoff is 'scheduled'; the invoice workflow's zip and mail steps wait as
-- 'waiting' until their parents end (deleted too, but not counted: they are not table rows).
WITH gone AS (
    DELETE FROM pgq.jobs
    WHERE id = ANY(%(ids)s::bigint[] || %(steps)s::bigint[])
      AND state IN ('available', 'scheduled', 'waiting')
    RETURNING id
)
SELECT count(*) FILTER (WHERE id = ANY(%(ids)s::bigint[]))
FROM gone;
