-- The completions a claim carries: the jobs this worker finished since its last claim, deleted
-- in the claim's own transaction, so that a batch costs one statement and one commit.

-- name: done
-- The jobs in %(done_ids)s, fenced on (id, %(done_lease_ids)s) (empty arrays when there are
-- none). Only running jobs have a lease_id (a table constraint), and the plan must look each id
-- up by primary key: psycopg prepares statements it runs often, and a generic plan for
-- "state = 'running'" would scan every running job for every id. By primary key, each id's
-- lease looked up beside it: a join with the unnested pairs is hashed over the whole table in a
-- generic plan made while the table was small.
DELETE FROM pgq.jobs AS j
WHERE j.id = ANY (%(done_ids)s::bigint[])
  AND j.lease_id = (%(done_lease_ids)s::bigint[])[
      array_position(%(done_ids)s::bigint[], j.id)]
RETURNING j.id, j.queue, j.kind, j.attempts, j.created_at, j.started_at, j.errors, j.batch_id,
          j.order_key

-- name: recorded
-- With %(history)s, a compact history row for each (with the errors of its earlier attempts:
-- null, and free, for a job that never failed). Only in the variants that record history: run
-- or not, its node cost every claim of a child without history about 8 us of the server's time.
INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                             finished_at, errors)
SELECT id, queue, kind, 'completed', attempts, created_at, started_at, now(), errors
FROM done
WHERE %(history)s

-- name: spent
-- What the attempts written with these outcomes cost (pgq.attempt_costs, migration 0056;
-- docs/job-cost.md), one row per attempt in %(cost_ids)s and its seven parallel arrays (empty
-- when none ran). Unfenced: an attempt that ran cost what it cost, whoever holds its job now.
-- Only in the variants that record history (the costs are kept with it). As a statement of its
-- own beside the claim, it put every write of a child keeping history in pipeline mode: the
-- children's CPU at batch 1 was 339 against 246 us a job (issue 36, child_cpu_ab.py). Sent
-- alone too, for outcomes written without a claim statement (supervisor.queue.costs.record).
INSERT INTO pgq.attempt_costs (job_id, attempt, queue, kind, tenant, outcome, cpu_seconds,
                               peak_memory)
SELECT *
FROM unnest(%(cost_ids)s::bigint[], %(cost_attempts)s::integer[], %(cost_queues)s::text[],
            %(cost_kinds)s::text[], %(cost_tenants)s::text[], %(cost_outcomes)s::text[],
            %(cost_cpu)s::float8[], %(cost_memory)s::bigint[])
