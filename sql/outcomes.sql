-- Outcomes (issue 23): outcome unknown and its reconciler, results, batches (their purges are in
-- maintenance.sql). Loaded with every other sql/*.sql file into one dict
-- (supervisor/queue/queries.py); the same rules: a "-- name:" line, the description, the
-- statement; every value a parameter.

-- name: create_batch
-- Makes the batch of the jobs %(ids)s, just enqueued in the caller's transaction: the batch row
-- (with its `then` job's description, tenant, trace context and order key included), each member's batch_id, and one counter row per shard
-- (a member's shard is id % shards, as in pgq.batch_ended). Returns the batch's id and how
-- many shards hold members (0 for an empty batch, which the caller finishes at once).
WITH batch AS (
    INSERT INTO pgq.batches (total, shards, shards_left, then_kind, then_queue, then_args,
                             then_priority, then_max_attempts, then_delay, then_tenant,
                             then_traceparent, then_order_key)
    SELECT cardinality(%(ids)s::bigint[]),
           %(shards)s::integer,
           (SELECT count(DISTINCT mod(m, %(shards)s::integer))
            FROM unnest(%(ids)s::bigint[]) AS m),
           %(then_kind)s::text,
           %(then_queue)s::text,
           %(then_args)s::jsonb,
           %(then_priority)s::smallint,
           %(then_max_attempts)s::integer,
           %(then_delay)s::float8,
           %(then_tenant)s::text,
           %(then_traceparent)s::text,
           %(then_order_key)s::text
    RETURNING id, shards, shards_left
),
members AS (
    UPDATE pgq.jobs AS j
    SET batch_id = batch.id
    FROM batch
    WHERE j.id = ANY(%(ids)s::bigint[])
    RETURNING j.id
),
counters AS (
    INSERT INTO pgq.batch_shards (batch_id, shard, remaining)
    SELECT batch.id, mod(m, batch.shards)::integer, count(*)
    FROM unnest(%(ids)s::bigint[]) AS m
    CROSS JOIN batch
    GROUP BY 1, 2
    RETURNING 1
)
SELECT batch.id, batch.shards_left, (SELECT count(*) FROM members), (SELECT count(*) FROM counters)
FROM batch;

-- name: finish_batch
-- Finishes a batch with no members at once (enqueues its `then` job); returns the job's id.
SELECT pgq.batch_finish(b.id)
FROM pgq.batches AS b
WHERE b.id = %(id)s
FOR UPDATE;

-- name: batch_status
-- A batch's progress, summed over its shard counters (no member is read).
SELECT b.id, b.total,
       coalesce(sum(s.remaining), 0)::integer AS remaining,
       coalesce(sum(s.completed), 0)::integer AS completed,
       coalesce(sum(s.discarded), 0)::integer AS discarded,
       coalesce(sum(s.cancelled), 0)::integer AS cancelled,
       b.then_kind, b.then_queue, b.then_job_id, b.created_at, b.finished_at, b.shards
FROM pgq.batches AS b
LEFT JOIN pgq.batch_shards AS s ON s.batch_id = b.id
WHERE b.id = %(id)s
GROUP BY b.id;

-- name: recent_batches
-- The newest batches with their progress, for the dashboard.
SELECT b.id, b.total,
       coalesce(sum(s.remaining), 0)::integer AS remaining,
       coalesce(sum(s.completed), 0)::integer AS completed,
       coalesce(sum(s.discarded), 0)::integer AS discarded,
       coalesce(sum(s.cancelled), 0)::integer AS cancelled,
       b.then_kind, b.then_queue, b.then_job_id, b.created_at, b.finished_at, b.shards
FROM (SELECT * FROM pgq.batches ORDER BY id DESC LIMIT %(limit)s) AS b
LEFT JOIN pgq.batch_shards AS s ON s.batch_id = b.id
GROUP BY b.id, b.total, b.then_kind, b.then_queue, b.then_job_id, b.created_at, b.finished_at,
         b.shards
ORDER BY b.id DESC;

-- name: job_result
-- What job %(id)s's handler returned, when it completed and returned something.
SELECT result, attempt, finished_at
FROM pgq.job_results
WHERE id = %(id)s;

-- name: list_unknown
-- Jobs whose outcome is unknown, oldest first (status, the dashboard, `jobs list`).
SELECT id, queue, kind, attempts, max_attempts, run_at, started_at, last_error
FROM pgq.jobs
WHERE state = 'unknown'
ORDER BY id
LIMIT %(limit)s;

-- name: count_unknown
-- How many jobs wait in 'unknown', per queue and kind (status, /metrics).
SELECT queue, kind, count(*)
FROM pgq.jobs
WHERE state = 'unknown'
GROUP BY queue, kind
ORDER BY queue, kind;

-- name: reconcile_due
-- Whether an unknown job of a kind with a reconcile hook is due (the master asks before it
-- forks a reconciler): one probe of the small jobs_unknown index.
SELECT EXISTS (
    SELECT 1
    FROM pgq.jobs
    WHERE state = 'unknown'
      AND run_at <= now()
      AND kind = ANY(%(kinds)s::text[])
);

-- name: reconcile_take
-- Takes up to %(limit)s due unknown jobs of kinds with hooks for one reconciler round: their
-- run_at moves %(hold)s seconds ahead, so no other reconciler (on any host) takes them while
-- the hooks run, and the new run_at is the round's fence (returned; the answer is written only
-- where it still matches). A round that dies leaves them due again after the hold.
WITH due AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'unknown'
      AND run_at <= now()
      AND kind = ANY(%(kinds)s::text[])
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgq.jobs AS j
SET run_at = now() + make_interval(secs => %(hold)s::float8)
FROM due
WHERE j.id = due.id
RETURNING j.id, j.kind, j.queue, j.args, j.attempts, j.max_attempts, j.unique_key, j.created_at,
          j.last_error, j.run_at;

-- name: reconcile_defer
-- A hook that failed or gave no answer: the job stays unknown, its hook asked again after a
-- backoff that doubles with each failed round (from %(base)s seconds, at most an hour); the
-- failure is kept in last_error and errors. Fenced on the round's run_at.
UPDATE pgq.jobs AS j
SET run_at = now() + make_interval(secs => least(3600.0, %(base)s::float8 * 2 ^ least(t.tries, 12))),
    last_error = %(error)s,
    errors = pgq.error_kept(j.errors, j.attempts, %(error)s)
FROM (
    SELECT count(*)::integer AS tries
    FROM pgq.jobs AS k, jsonb_array_elements(coalesce(k.errors, '[]')) AS e
    WHERE k.id = %(id)s
      AND starts_with(e ->> 'error', 'reconcile hook')
) AS t
WHERE j.id = %(id)s
  AND j.state = 'unknown'
  AND j.run_at = %(token)s::timestamptz
RETURNING j.id;

-- name: resolve_unknown
-- Ends the outcome-unknown state of jobs %(ids)s as %(resolution)s: 'completed' (the effect
-- happened: the job is deleted like any completion, with its history row), 'retry' (it did not:
-- due again now, with one more attempt allowed if it had none left) or 'discarded' (a dead
-- letter). Fenced on state = 'unknown' and, for a reconciler's round, on its run_at
-- (%(token)s; null for an operator). Members of batches count down their batch. Returns each
-- job resolved with its new state. A 'retry' of a job whose unique key another job holds is not
-- applied: the job stays unknown and comes back as 'held', with that job's id (the holder
-- column; null otherwise). Since 0041 an unknown job holds its key, so this is only met on a
-- database whose duplicates predate it (0040 refuses to migrate until they are resolved).
-- The order key (0066) is read through to_jsonb(j): the operator resolves those duplicates with
-- this release on a database that migrate left before 0041, where the column does not exist
-- yet (a rare statement: the row's conversion costs nothing that matters).
WITH held AS (
    SELECT j.id, j.queue, j.kind, 'held'::text AS state, h.id AS holder
    FROM pgq.jobs AS j
    CROSS JOIN LATERAL (
        SELECT o.id
        FROM pgq.jobs AS o
        WHERE o.unique_key = j.unique_key
          AND o.id <> j.id
          AND o.state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
        ORDER BY o.id
        LIMIT 1
    ) AS h
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.state = 'unknown'
      AND j.unique_key IS NOT NULL
      AND (%(token)s::timestamptz IS NULL OR j.run_at = %(token)s::timestamptz)
      AND %(resolution)s::text = 'retry'
),
target AS (
    SELECT id
    FROM pgq.jobs
    WHERE id = ANY(%(ids)s::bigint[])
      AND state = 'unknown'
      AND (%(token)s::timestamptz IS NULL OR run_at = %(token)s::timestamptz)
      AND id NOT IN (SELECT id FROM held)
    FOR UPDATE
),
removed AS (
    DELETE FROM pgq.jobs AS j
    USING target AS t
    WHERE j.id = t.id
      AND %(resolution)s::text = 'completed'
    RETURNING j.id, j.queue, j.kind, 'completed'::text AS state, j.attempts, j.created_at,
              j.started_at, now() AS finished_at, j.errors, j.batch_id,
              to_jsonb(j) ->> 'order_key' AS order_key
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = CASE WHEN %(resolution)s::text = 'retry' THEN 'available' ELSE 'discarded' END,
        run_at = now(),
        max_attempts = CASE
            WHEN %(resolution)s::text = 'retry' THEN greatest(j.max_attempts, j.attempts + 1)
            ELSE j.max_attempts
        END,
        finished_at = CASE WHEN %(resolution)s::text = 'discarded' THEN now() END
    FROM target AS t
    WHERE j.id = t.id
      AND %(resolution)s::text IN ('retry', 'discarded')
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id, to_jsonb(j) ->> 'order_key' AS order_key
),
finished AS (
    SELECT * FROM removed
    UNION ALL
    SELECT * FROM moved WHERE state = 'discarded'
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM finished
    WHERE %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM finished
    WHERE batch_id IS NOT NULL
    HAVING count(*) > 0
),
ordered AS (
    -- A resolved job with an order key lets its key's next follower go (pgq.order_ended, 0066);
    -- one resolved 'retry' keeps holding its key.
    SELECT pgq.order_ended(array_agg(queue), array_agg(order_key), array_agg(false))
    FROM finished
    WHERE order_key IS NOT NULL
    HAVING count(*) > 0
),
woken AS (
    SELECT pg_notify('pgq_jobs', queue)
    FROM moved
    WHERE state = 'available'
    GROUP BY queue
)
SELECT r.id, r.queue, r.kind, r.state, r.holder
FROM (SELECT id, queue, kind, state, NULL::bigint AS holder FROM removed
      UNION ALL
      SELECT id, queue, kind, state, NULL FROM moved
      UNION ALL
      SELECT id, queue, kind, state, holder FROM held) AS r
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o
CROSS JOIN (SELECT count(*) FROM woken) AS w
ORDER BY r.id;
