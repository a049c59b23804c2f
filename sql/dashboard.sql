-- Named queries of the web dashboard (supervisor/web/), loaded like sql/queries.sql.
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
-- Per queue in %(queues)s: available jobs due now and due later, counted over at most %(cap)s
-- entries of jobs_claim (past the cap the figures are lower bounds and `capped` says so), and
-- the oldest due job's wait. The oldest due job is the first by run_at within some priority:
-- a loose scan over the queue's priorities reads one index entry per priority.
SELECT q.queue,
       w.due,
       w.later,
       w.seen > %(cap)s AS capped,
       o.oldest_wait
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE s.run_at <= now()) AS due,
           count(*) FILTER (WHERE s.run_at > now()) AS later,
           count(*) AS seen
    FROM (SELECT j.run_at
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

-- name: web_running
-- Running jobs per queue, from the jobs_lease index; a host holds a few per child, so the
-- %(cap)s bound is only a guard (`seen` above it means the figures are lower bounds).
SELECT queue, count(*) AS running, sum(count(*)) OVER () AS seen
FROM (SELECT queue
      FROM pgq.jobs
      WHERE state = 'running'
      LIMIT %(cap)s + 1) AS r
GROUP BY queue;

-- name: web_discarded
-- Dead letters per queue among the newest %(cap)s, from the jobs_discarded index read
-- backwards (`seen` above the cap means there are more, and the figures are lower bounds).
SELECT queue, count(*) AS discarded, sum(count(*)) OVER () AS seen
FROM (SELECT queue
      FROM pgq.jobs
      WHERE state = 'discarded'
      ORDER BY finished_at DESC
      LIMIT %(cap)s + 1) AS d
GROUP BY queue;

-- name: web_throughput
-- Completions and discards per queue and minute over the last hour, from job_history (kept only
-- with history.enabled), through its finished_at index.
SELECT queue,
       outcome,
       extract(epoch FROM now() - date_bin('1 minute', finished_at, now()))::float8 AS ago,
       count(*) AS jobs
FROM pgq.job_history
WHERE finished_at > now() - interval '1 hour'
GROUP BY queue, outcome, date_bin('1 minute', finished_at, now());

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

-- name: web_job
-- Everything about one job, and the supervisor and child that hold it while it runs.
SELECT j.id, j.queue, j.kind, j.state, j.args, j.priority, j.attempts, j.max_attempts,
       j.unique_key, j.last_error, j.created_at, j.run_at, j.started_at, j.finished_at,
       j.locked_by, j.lease_until, s.host, w.pool, w.slot, w.pid, w.spawned_at
FROM pgq.jobs AS j
LEFT JOIN pgq.workers AS w ON w.worker_id = j.locked_by
LEFT JOIN pgq.supervisors AS s ON s.id = w.supervisor_id
WHERE j.id = %(id)s;

-- name: web_dead_letters
-- One page of dead letters, newest first, after the (finished_at, id) of the previous page's
-- last row; filters are optional (null means any); %(older_than)s is in seconds. Reads the jobs_discarded index backwards and
-- stops after %(scan)s entries, so a filter that matches little cannot read every dead letter.
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
