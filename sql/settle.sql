-- Settle and leases: finishing claimed jobs, renewing their leases, giving back a lost worker's jobs.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: settle
-- Records every outcome other than success for claimed jobs, fenced on (id, lease_id): back to
-- available after a delay (retry, snooze), back to available at its old run_at (release), or
-- discarded with its reason (the dead-letter queue). %(refunds)s gives an attempt back (snooze,
-- release); a null delay keeps run_at; a null error keeps the previous one, and an error is
-- also appended to the job's errors (pgq.error_kept: the most recent 25). Returns the ids that
-- were still ours. With %(history)s, discards also write a history row. Fenced by lease_id alone,
-- like complete, so the plan looks jobs up by primary key. A job with a cancel request
-- (pgq.cancel) that would go back to available ends 'cancelled' instead: it never runs again.
-- %(states)s may also say 'cancelled' itself (a threaded handler that saw the request), or
-- 'unknown' (an attempt of a kind with effects outside the database that timed out: due for its
-- reconcile hook at once, not finished). Discarded and cancelled members count down their batch.
WITH settled AS (
    UPDATE pgq.jobs AS j
    -- A retry or snooze for later waits as 'scheduled', outside the claim index.
    SET state = CASE
            WHEN o.state = 'available' AND j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN o.state = 'available' AND o.delay > 0 THEN 'scheduled'
            ELSE o.state
        END,
        run_at = CASE
            WHEN o.delay IS NULL THEN j.run_at
            ELSE now() + make_interval(secs => o.delay)
        END,
        attempts = j.attempts - o.refund,
        last_error = coalesce(o.error, j.last_error),
        errors = pgq.error_kept(j.errors, j.attempts, o.error),
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN o.state = 'unknown' THEN NULL
            WHEN o.state <> 'available' OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM unnest(
        %(ids)s::bigint[],
        %(lease_ids)s::bigint[],
        %(states)s::text[],
        %(delays)s::float8[],
        %(refunds)s::integer[],
        %(errors)s::text[]
    ) AS o(id, lease_id, state, delay, refund, error)
    -- = ANY: the primary key's look-ups even in a generic plan made while the table was
    -- small (a join alone was hashed over the whole table).
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND j.id = o.id
      AND j.lease_id = o.lease_id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id, j.order_key
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM settled
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM settled
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
),
ordered AS (
    -- Jobs with order keys that ended let their keys' next followers go (pgq.order_ended, 0066).
    SELECT pgq.order_ended(array_agg(queue), array_agg(order_key), array_agg(false))
    FROM settled
    WHERE order_key IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT s.id
FROM settled AS s
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o;

-- name: renew_leases
-- Extends the leases of claimed jobs, fenced on (id, lease_id) alone
-- (see complete); returns the ids still held.
UPDATE pgq.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease_seconds)s::float8)
FROM unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS f(id, lease_id)
WHERE j.id = f.id
  AND j.lease_id = f.lease_id
RETURNING j.id;

-- name: renew_worker_leases
-- Extends the leases of every job held by these workers (identities are never reused, so a job
-- re-claimed by anyone else no longer matches). One statement per interval for a whole host.
UPDATE pgq.jobs
SET lease_until = now() + make_interval(secs => %(lease_seconds)s::float8)
WHERE state = 'running'
  AND locked_by = ANY(%(workers)s::text[]);

-- name: lease_held
-- Whether a claimed job is still ours and its lease has not run out.
SELECT EXISTS (
    SELECT 1
    FROM pgq.jobs
    WHERE id = %(id)s
      AND lease_id = %(lease_id)s
      AND state = 'running'
      AND lease_until > now()
);

-- name: requeue_worker
-- Gives back every job held by a worker that is known to be gone (its process exited), or,
-- for a live worker that reconnected, every job it holds but not those in %(keep)s (the rest
-- were claimed as its old connection died, and it never received them). A job
-- in %(spent)s was running when the worker died: its attempt stays spent, since it may be what
-- killed the worker, and it is discarded when out of attempts. The worker's other jobs were
-- claimed but not started (or finished but not yet recorded): they get their attempt back.
-- A spent attempt records %(reason)s in last_error and appends it to errors.
-- %(policy_kinds)s / %(policy_max_attempts)s carry the operator's per-kind max_attempts, which
-- win over the row's own. A job with a cancel request ends 'cancelled' (the master stops a child
-- to cancel its job, and this is how that job's claim ends).
-- Outcome unknown: a job that started (in %(spent)s or %(started)s: it ran, whether or not it
-- finished) of a kind with effects outside the database (in %(external_kinds)s, from this
-- supervisor's YAML, or declared by any live supervisor: pgq.supervisors.external_kinds) may
-- have done its effect; it goes to 'unknown' with the reason, its attempt spent, instead of
-- running again. Discarded and cancelled members count down their batch.
WITH target AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'running'
      AND locked_by = %(worker)s
      AND id <> ALL(%(keep)s::bigint[])
    FOR UPDATE
),
decided AS (
    SELECT j.id,
           s.spent,
           s.spent AND j.attempts >= coalesce(p.max_attempts, j.max_attempts) AS exhausted,
           (s.spent OR j.id = ANY(%(started)s::bigint[]))
               AND (j.kind = ANY(%(external_kinds)s::text[])
                    OR EXISTS (SELECT 1
                               FROM pgq.supervisors AS v
                               WHERE j.kind = ANY(v.external_kinds))) AS unknown
    FROM pgq.jobs AS j
    JOIN target USING (id)
    -- A null %(spent)s: nobody knows which jobs were running, so every attempt counts.
    CROSS JOIN LATERAL (
        SELECT coalesce(j.id = ANY(%(spent)s::bigint[]), true) AS spent
    ) AS s
    LEFT JOIN unnest(%(policy_kinds)s::text[], %(policy_max_attempts)s::integer[])
        AS p(kind, max_attempts) ON p.kind = j.kind
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = CASE
            WHEN d.unknown THEN 'unknown'
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN d.exhausted THEN 'discarded'
            ELSE 'available'
        END,
        run_at = now(),
        attempts = CASE WHEN d.spent OR d.unknown THEN j.attempts ELSE j.attempts - 1 END,
        last_error = CASE
            WHEN d.unknown THEN 'outcome unknown (effects: external): ' || %(reason)s
            WHEN d.spent THEN %(reason)s
            ELSE j.last_error
        END,
        errors = CASE
            WHEN d.unknown THEN pgq.error_kept(j.errors, j.attempts,
                                               'outcome unknown (effects: external): '
                                               || %(reason)s)
            WHEN d.spent THEN pgq.error_kept(j.errors, j.attempts, %(reason)s)
            ELSE j.errors
        END,
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN d.unknown THEN NULL
            WHEN d.exhausted OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM decided AS d
    WHERE j.id = d.id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id, j.order_key
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM moved
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM moved
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
),
ordered AS (
    -- Jobs with order keys that ended let their keys' next followers go (pgq.order_ended, 0066).
    SELECT pgq.order_ended(array_agg(queue), array_agg(order_key), array_agg(false))
    FROM moved
    WHERE order_key IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT m.id, m.queue, m.kind, m.state, m.attempts
FROM moved AS m
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o;
