-- Control: the operator's actions on jobs and queues (cancel, pause, resume, retry, replay).
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: replay
-- Puts dead letters back in their queues with attempts reset. Every filter is optional but the
-- caller must give at least one (or say all): ids, kind, queue, finished before a time.
-- A dead letter whose unique key is held again (by a waiting, running or unknown job, or by a
-- newer dead letter replayed in the same call) stays dead: replaying it would duplicate that job. Returns
-- every matching dead letter: replayed true with its queue, or replayed false with its key.
WITH locked AS (
    SELECT id, unique_key, finished_at
    FROM pgq.jobs
    WHERE state = 'discarded'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(finished_before)s::timestamptz IS NULL
           OR finished_at < %(finished_before)s::timestamptz)
    FOR UPDATE
),
matching AS (
    SELECT id, unique_key,
           row_number() OVER (PARTITION BY unique_key ORDER BY finished_at DESC, id DESC) AS nth
    FROM locked
),
replayable AS (
    SELECT m.id
    FROM matching AS m
    WHERE m.unique_key IS NULL
       OR (m.nth = 1
           AND NOT EXISTS (
               SELECT 1
               FROM pgq.jobs AS holder
               WHERE holder.unique_key = m.unique_key
                 -- 'waiting': a follower of an order key holds its unique key (0070).
                 AND holder.state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
                 AND holder.id > 0
           ))
),
replayed AS (
    -- A cancel request made while it ran belongs to that run: kept, it would have the new run
    -- stopped a second after it starts.
    UPDATE pgq.jobs AS j
    SET state = 'available',
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        cancel_requested_at = NULL,
        -- Its batch counted it when it was discarded; replayed, it runs on its own. A workflow
        -- step stays in its workflow (0050): re-opened below, it releases its children again.
        batch_id = CASE WHEN w.job_id IS NOT NULL THEN j.batch_id END
    FROM replayable AS r
    LEFT JOIN pgq.workflow_steps AS w ON w.job_id = r.id
    WHERE j.id = r.id
    RETURNING j.id, j.queue, j.batch_id, j.order_key
),
rejoined AS (
    -- A dead letter with an order key joins its key again, as an enqueue does: it waits when
    -- a job of the key has not ended (pgq.order_rejoin, 0066).
    SELECT pgq.order_rejoin(array_agg(id ORDER BY id))
    FROM replayed
    WHERE order_key IS NOT NULL
    HAVING count(*) > 0
),
reopened AS (
    SELECT pgq.workflow_reopen(array_agg(id ORDER BY id))
    FROM replayed
    WHERE batch_id IS NOT NULL
    HAVING count(*) > 0
)
SELECT id, queue, NULL::text AS unique_key, true AS replayed
FROM replayed
CROSS JOIN (SELECT count(*) FROM reopened) AS o
CROSS JOIN (SELECT count(*) FROM rejoined) AS k
UNION ALL
SELECT m.id, NULL, m.unique_key, false
FROM matching AS m
WHERE m.id NOT IN (SELECT id FROM replayable);

-- name: cancel_jobs
-- Cancels the jobs %(ids)s. A waiting job (available, or scheduled for later) becomes
-- 'cancelled' at once and keeps finished_at, like a dead letter. A running job cannot be
-- changed under its owner's fence: it gets cancel_requested_at, and the master running it stops
-- it (the write that ends its claim then makes it 'cancelled'). Returns each id found with what
-- happened: 'cancelled now', 'cancel requested' (running: stopping) or its state when it had
-- already finished ('discarded', 'cancelled'). FOR UPDATE waits for a claim in flight, so a job claimed
-- at this very moment is seen running, never cancelled under its new owner.
-- A job with an order key (0066) that has not started is cancelled under its key's row lock,
-- taken before the job's (keys_first), in the order of every ending: the ending of the key's
-- running head takes the key, then the follower it releases; cancelling that follower the
-- other way round would deadlock with it.
WITH keys_first AS (
    SELECT o.queue
    FROM pgq.order_keys AS o
    WHERE (o.queue, o.key) IN (SELECT j.queue, j.order_key
                               FROM pgq.jobs AS j
                               WHERE j.id = ANY(%(ids)s::bigint[])
                                 AND j.order_key IS NOT NULL
                                 AND j.state IN ('available', 'scheduled', 'waiting'))
    ORDER BY o.queue COLLATE "C", o.key COLLATE "C"
    FOR UPDATE OF o
),
target AS (
    SELECT id, state
    FROM pgq.jobs
    WHERE id = ANY(%(ids)s::bigint[])
      AND (SELECT count(*) FROM keys_first) >= 0
    FOR UPDATE
),
waiting AS (
    UPDATE pgq.jobs AS j
    SET state = 'cancelled',
        finished_at = now(),
        cancel_requested_at = now()
    FROM target AS t
    WHERE j.id = t.id
      -- 'waiting': a workflow step whose parents have not all ended (0050); batch_ended below
      -- then cancels its 'cancel' descendants (pgq.workflow_ended).
      AND t.state IN ('available', 'scheduled', 'waiting')
    RETURNING j.id, j.queue, j.kind, j.attempts, j.created_at, j.started_at, j.finished_at,
              j.errors, j.batch_id, j.order_key
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg('cancelled'::text))
    FROM waiting
    WHERE batch_id IS NOT NULL
    HAVING count(*) > 0
),
ordered AS (
    -- A cancelled head lets its key's next follower go; a cancelled follower only leaves the
    -- key's count (pgq.order_ended, 0066).
    SELECT pgq.order_ended(array_agg(w.queue), array_agg(w.order_key),
                           array_agg(t.state = 'waiting'))
    FROM waiting AS w
    JOIN target AS t ON t.id = w.id
    WHERE w.order_key IS NOT NULL
    HAVING count(*) > 0
),
requested AS (
    UPDATE pgq.jobs AS j
    SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM target AS t
    WHERE j.id = t.id
      AND t.state = 'running'
    RETURNING j.id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, 'cancelled', attempts, created_at, started_at, finished_at, errors
    FROM waiting
    WHERE %(history)s
)
SELECT t.id,
       CASE
           WHEN w.id IS NOT NULL THEN 'cancelled now'
           WHEN r.id IS NOT NULL THEN 'cancel requested'
           ELSE t.state
       END AS result
FROM target AS t
LEFT JOIN waiting AS w ON w.id = t.id
LEFT JOIN requested AS r ON r.id = t.id
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o
ORDER BY t.id;

-- name: cancel_requests
-- The jobs held by these workers that someone asked to cancel (read every second by each
-- master from the small jobs_cancel_requests index).
SELECT id, locked_by, kind, queue
FROM pgq.jobs
WHERE state = 'running'
  AND cancel_requested_at IS NOT NULL
  AND locked_by = ANY(%(workers)s::text[]);

-- name: cancel_requested
-- Whether a claimed job, still ours, has a cancel request (JobContext.cancelled()).
SELECT cancel_requested_at IS NOT NULL
FROM pgq.jobs
WHERE id = %(id)s
  AND lease_id = %(lease_id)s;

-- name: unstarted_stops
-- Which claimed jobs, still ours and not started yet, must not start: those someone asked to
-- cancel, and those of a paused queue (a single-threaded child asks before the next job of a
-- batch that has waited; the ids and lease ids are the batch's, pairwise).
SELECT j.id,
       j.cancel_requested_at IS NOT NULL AS cancelled,
       EXISTS (SELECT 1 FROM pgq.queue_pauses AS p WHERE p.queue = j.queue) AS paused
FROM pgq.jobs AS j
JOIN unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS c (id, lease_id)
  ON c.id = j.id
 AND c.lease_id = j.lease_id
WHERE j.state = 'running'
  AND (j.cancel_requested_at IS NOT NULL
       OR EXISTS (SELECT 1 FROM pgq.queue_pauses AS p WHERE p.queue = j.queue));

-- name: pause_queue
-- Pauses a queue; returns a row only when it was not paused already.
INSERT INTO pgq.queue_pauses (queue)
VALUES (%(queue)s)
ON CONFLICT (queue) DO NOTHING
RETURNING paused_at;

-- name: resume_queue
-- Resumes a paused queue; returns a row only when it was paused. Wakes its idle workers at
-- commit, since due jobs may have piled up while it was paused.
WITH resumed AS (
    DELETE FROM pgq.queue_pauses
    WHERE queue = %(queue)s
    RETURNING queue
)
SELECT queue, pg_notify('pgq_jobs', queue) IS NULL
FROM resumed;

-- name: paused_queues
-- Every paused queue, with when and by whom.
SELECT queue, paused_at, paused_by
FROM pgq.queue_pauses
ORDER BY queue;

-- name: retry_now
-- Makes a waiting job due now (a job waiting for its retry's backoff, or scheduled for later);
-- it keeps its attempts. Returns the job's queue and state before, or nothing when the job is
-- not waiting (running, finished or gone). Wakes the queue's idle workers at commit.
WITH target AS (
    SELECT id, state, run_at
    FROM pgq.jobs
    WHERE id = %(id)s
      AND state IN ('available', 'scheduled')
    FOR UPDATE
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = 'available',
        run_at = least(j.run_at, now())
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.queue
)
SELECT m.queue, t.state, t.run_at, pg_notify('pgq_jobs', m.queue) IS NULL
FROM moved AS m
JOIN target AS t ON t.id = m.id;
