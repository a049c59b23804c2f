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

-- name: cli_queue_in_use
-- Whether queue %(queue)s holds a job due or waiting to be claimed, or is paused already
-- (`queues pause` refuses a queue nothing knows: a typo). The jobs_claim index, one probe.
SELECT EXISTS (SELECT 1 FROM pgq.jobs WHERE queue = %(queue)s AND state = 'available')
    OR EXISTS (SELECT 1 FROM pgq.queue_pauses WHERE queue = %(queue)s);
