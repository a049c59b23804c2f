-- Elastic pools (issue 34, docs/elastic-pools.md): what the master's scaling reads on a session
-- of its own (supervisor/services/scaling_feed.py, sent without waiting) and what its heartbeat
-- publishes. Client-side bound: the scaling session sends plain text, so these are rendered
-- with their literals before they are sent.

-- name: scaling_backlog
-- Per queue of %(queues)s and kind: the due jobs waiting (counted up to %(cap)s per queue: past
-- that the pool is at max anyway, and the count stays a bounded read of the claim index), and
-- the queue's running jobs on every host (the jobs_running index). A queue with nothing due has
-- one row with a null kind.
SELECT q.queue,
       r.kind,
       coalesce(r.ready, 0) AS ready,
       (SELECT count(*)
        FROM pgq.jobs AS j
        WHERE j.queue = q.queue
          AND j.state = 'running') AS running
FROM unnest(%(queues)s::text[]) AS q (queue)
LEFT JOIN LATERAL (
    SELECT d.kind, count(*) AS ready
    FROM (
        SELECT j.kind
        FROM pgq.jobs AS j
        WHERE j.queue = q.queue
          AND j.state = 'available'
          AND j.run_at <= now()
        LIMIT %(cap)s
    ) AS d
    GROUP BY d.kind
) AS r ON true;

-- name: scaling_fleet
-- Per pool name: the summed max of the other live supervisors serving it (their capacity for
-- the same queues), from what their heartbeats published.
SELECT p.key AS pool,
       sum((p.value ->> 'max')::integer) AS others_max,
       count(*) AS others
FROM pgq.supervisors AS s
CROSS JOIN LATERAL jsonb_each(coalesce(s.scaling, '{}'::jsonb)) AS p
WHERE s.id <> %(id)s
  AND s.heartbeat_at > now() - make_interval(secs => %(stale_after)s::float8)
GROUP BY p.key;

-- name: publish_scaling
-- This supervisor's pools as its scaling sees them (with its heartbeat).
UPDATE pgq.supervisors
SET scaling = %(scaling)s::jsonb
WHERE id = %(id)s;

-- name: list_scaling
-- Each live supervisor's pools as its scaling last published them, for status and the dashboard.
SELECT id, scaling
FROM pgq.supervisors
WHERE scaling IS NOT NULL;
