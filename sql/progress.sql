-- A job's progress (issue 34, docs/job-cost.md; table pgq.job_progress, migration 0057).

-- name: write_progress
-- What job %(id)s's attempt %(attempt)s last said; an earlier attempt's row is replaced, a
-- later one's is kept (a late write of an attempt that lost its lease).
INSERT INTO pgq.job_progress AS p (job_id, attempt, fraction, message)
VALUES (%(id)s, %(attempt)s, %(fraction)s, %(message)s)
ON CONFLICT (job_id) DO UPDATE
SET attempt = EXCLUDED.attempt,
    fraction = EXCLUDED.fraction,
    message = EXCLUDED.message,
    updated_at = now()
WHERE p.attempt <= EXCLUDED.attempt;

-- name: read_progress
-- The progress of the jobs in %(ids)s that have any.
SELECT job_id, attempt, fraction, message, updated_at
FROM pgq.job_progress
WHERE job_id = ANY (%(ids)s::bigint[]);

-- name: purge_progress
-- Deletes up to %(limit)s progress rows not updated since %(older_than)s.
DELETE FROM pgq.job_progress
WHERE job_id = ANY (ARRAY(
    SELECT job_id
    FROM pgq.job_progress
    WHERE updated_at < %(older_than)s
    LIMIT %(limit)s
));
