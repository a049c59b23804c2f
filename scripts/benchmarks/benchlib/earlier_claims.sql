-- Statements that benchmarks under scripts/benchmarks/ compare against (named like sql/*.sql,
-- read by claim_shapes.py); nothing in the supervisor runs them.

-- name: claim_one_queue
-- The claim of the release before tenants and one-statement pools: one queue per statement,
-- in priority order over jobs_claim, no tenant rotation. scripts/benchmarks/claim_shapes.py measures the
-- current claim against it ("fairness off", and a pool's queues tried one statement each).
WITH done AS (
    DELETE FROM pgq.jobs AS j
    USING unnest(%(done_ids)s::bigint[], %(done_lease_ids)s::bigint[]) AS f(id, lease_id)
    WHERE j.id = f.id
      AND j.lease_id = f.lease_id
    RETURNING j.id, j.queue, j.kind, j.attempts, j.created_at, j.started_at, j.errors
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, 'completed', attempts, created_at, started_at, now(), errors
    FROM done
    WHERE %(history)s
),
token AS (
    SELECT nextval('pgq.lease_seq') AS lease_id
),
next AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'available'
      AND queue = %(queue)s
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM pgq.queue_pauses WHERE queue = %(queue)s)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE pgq.jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        lease_id = token.lease_id,
        locked_by = %(worker)s,
        lease_until = now() + make_interval(secs => %(lease_seconds)s::float8),
        started_at = now()
    FROM token
    -- By primary key, for as many ids as `next` found. A join against `next` would do, but a
    -- prepared statement's generic plan takes LIMIT %(limit)s for a tenth of the table and hashes
    -- the whole table to join it; PostgreSQL then plans the statement afresh at every run
    -- instead (0.6 ms of planning per claim). = ANY keeps the generic plan to index look-ups.
    WHERE j.id = ANY (ARRAY(SELECT id FROM next))
    RETURNING j.id, j.queue, j.kind, j.args, j.priority, j.run_at, j.attempts, j.max_attempts,
              j.lease_id, j.lease_until, j.created_at
)
SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, lease_id, lease_until,
       created_at, NULL::bigint[] AS completed
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, array_agg(id)
FROM done;

