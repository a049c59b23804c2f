-- name: claimed
-- Attempts are counted here, so a job that kills its worker every time still runs out of
-- attempts. By primary key, for as many ids as the caps kept. A join against them would do, but
-- a prepared statement's generic plan takes LIMIT %(limit)s for a tenth of the table and hashes
-- the whole table to join it; PostgreSQL then plans the statement afresh at every run instead
-- (0.6 ms of planning per claim). = ANY keeps the generic plan to index look-ups.
UPDATE pgq.jobs AS j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_id = token.lease_id,
    locked_by = %(worker)s,
    lease_until = now() + make_interval(secs => %(lease_seconds)s::float8),
    started_at = now()
FROM token
WHERE j.id = ANY (ARRAY(SELECT id FROM {kept}))
RETURNING j.id, j.queue, j.kind, j.args, j.priority, j.run_at, j.attempts, j.max_attempts,
          j.lease_id, j.lease_until, j.created_at, j.batch, j.traceparent, j.tenant

-- name: reply
-- Rows: one per claimed job, then one last row whose final column holds the ids of the finished
-- jobs that were still ours (null when none was): a finished job missing from it had lost its
-- lease to another worker, and its result was dropped. Its column `limit_wait` is set when a
-- limit held every job back: the seconds until the next rate token promised to this claim is
-- due (the child may sleep that long); -1 when a queue-wide concurrency limit is full. The
-- claim without limits adds a column `limits_found` (allowances.sql, no_limits).
--
-- The finished jobs' results and batch counts ride on this last row, read once from `done`:
-- %(results)s is a JSON array of [id, value] pairs ('[]' when none returned anything), kept in
-- pgq.job_results for the jobs still ours (pgq.keep_results, only when some job returned
-- something); a finished job of a batch counts down its batch (pgq.batch_ended, only when some
-- job belongs to a batch), which enqueues the batch's `then` job when it was the last; a
-- finished job with an order key lets its key's next follower go (pgq.order_ended, 0066, only
-- when some job has a key). They run
-- after the claim (so the batch counters' row locks are held for the commit alone), and the
-- claim's own text stays within the 1,024 characters pg_stat_activity keeps of a query. They
-- are the aggregate's own columns (volatile: kept though nothing reads them), not a lateral
-- join beside it: its nodes cost every claim about 40 us of the server's time
-- (scripts/benchmarks/idle_claim_cost.py).
SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, lease_id, lease_until,
       created_at, batch, traceparent, tenant, NULL::bigint[] AS completed,
       NULL::float8 AS limit_wait{limits_column}
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       {completed}, {wait}{limits_value}
{carried}

-- name: carried
-- The reply's last row's source in a claim that carries completions: the finished jobs, read
-- once from `done`, with their side effects (see reply). The claim from the head sent without
-- completions (claim_flat_head_unlimited_unaged_fresh: an idle child's claim after a wake-up,
-- its last completions having ridden on the claim that found nothing) has neither this nor
-- `done` and `recorded`: their nodes cost that claim about 70 us of its 740 on the server, run
-- or not (scripts/benchmarks/idle_claim_cost.py).
FROM (
    SELECT array_agg(id) AS ids,
           CASE
               WHEN count(*) > 0 AND %(results)s::text <> '[]'
               THEN pgq.keep_results(array_agg(id), array_agg(kind), array_agg(attempts),
                                     %(results)s::jsonb)
           END AS kept,
           CASE
               WHEN count(batch_id) > 0
               THEN pgq.batch_ended(array_agg(id) FILTER (WHERE batch_id IS NOT NULL),
                                    array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL),
                                    array_fill('completed'::text,
                                               ARRAY[count(batch_id)::integer]))
           END AS ended,
           CASE
               WHEN count(order_key) > 0
               THEN pgq.order_ended(array_agg(queue) FILTER (WHERE order_key IS NOT NULL),
                                    array_agg(order_key) FILTER (WHERE order_key IS NOT NULL),
                                    array_fill(false, ARRAY[count(order_key)::integer]))
           END AS ordered
    FROM done
) AS d
