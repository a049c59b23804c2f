-- Named queries of the operator's command line (supervisor.cli) that the library and the
-- supervisor do not share; loaded by supervisor.cli.session.cli_query.

-- name: cli_job_history
-- The history rows of job %(id)s (completed, discarded, cancelled: a replayed dead letter can
-- have several), newest first, at most %(limit)s: all that remains of a completed job. The
-- job_history_id index, one probe per daily partition.
SELECT outcome, attempts, created_at, started_at, finished_at, errors, queue, kind
FROM pgq.job_history
WHERE id = %(id)s
ORDER BY finished_at DESC
LIMIT %(limit)s;

