-- The flat claim (claim_builder's variants claim_flat_unlimited_unaged, past the child's cursors,
-- and claim_flat_head_unlimited_unaged, from the head, for a claim sent without any): the claim
-- of a child none
-- of whose claims has yet returned a job with a tenant, on a database without limits, in a pool
-- where no queue ages. No walk, no quota, no second pass: per queue reached, its best due jobs
-- straight from the index jobs_claim (queue, priority DESC, run_at, id, available jobs), in
-- order.sql's claim order across every tenant, locked with SKIP LOCKED. The walk's probe per
-- tenant visited, its wrap-around and its quota were most of an idle child's claim of one job
-- (1,158 us against the single-queue claim's 772; scripts/benchmarks/idle_claim_cost.py).
--
-- Right for a queue with tenants too, only without the fair rotation: it claims their jobs in
-- the global claim order. So the first job with a tenant it claims switches the child to the
-- walking variants for the rest of its life (supervisor/child/claimer.py), as limits_found does
-- to the claims with limits.
--
-- Cursors (supervisor/child/cursors.py): the child's cursor for the tenant '' of the queue,
-- when it has one, is where the pick starts (past it: the rest of its priority, then the lower
-- ones), so a held xmin horizon costs it what it costs the walk's probe past that cursor; with
-- none, from the head of the queue (the child's claim from the head). A claim without cursors
-- (an idle child's, as a cheap claim that finds nothing drops them) is the variant from the
-- head: one index scan per queue reached, without the cursor's look-up and the first half
-- (their nodes cost every claim about 45 us of the server's time, run or not).

-- name: flat_next
-- The pool's queues in the order the weights chose (%(queues)s), each reached only when the
-- ones before could not fill the batch (see pick.sql, next): its pick past the cursor
-- (flat_past_cursor), or from the head.
SELECT pick.id, pool.queue
FROM unnest(%(queues)s::text[]) AS pool(queue)
CROSS JOIN LATERAL (
    {flat_pick}
) AS pick
LIMIT %(limit)s

-- name: flat_past_cursor
-- From the queue's key (flat_key): order.sql's two halves, {pick}.
SELECT p.id
FROM (
    {flat_key}
) AS k
CROSS JOIN LATERAL (
    {pick}
    LIMIT %(limit)s
) AS p

-- name: flat_key
-- Where the queue's pick starts: past the child's cursor for its tenant '' (its key), else from
-- the head (a priority above every job's: a smallint's are at most 32767, and no run_at or id,
-- so the first half reads nothing). No row at all for a paused queue, or once a limit exists
-- (no_limits: the reply's limits_found then says so). LIMIT 1 (it is one row anyway): not
-- flattened into the pool's scan, where the pause check was hashed over pgq.queue_pauses (a
-- sequential scan) instead of one primary-key probe per queue reached.
SELECT coalesce(cur.priority, 32768) AS priority, cur.run_at, cur.id
FROM (
    {no_limits}
) AS lim
LEFT JOIN LATERAL (
    {flat_cursor}
) AS cur ON true
WHERE NOT EXISTS (SELECT 1 FROM pgq.queue_pauses AS qp WHERE qp.queue = pool.queue)
LIMIT 1

-- name: flat_cursor
-- The child's cursor of the queue's tenant '' (the jobs without a tenant), if it sent one.
SELECT c.priority, c.run_at, c.id
FROM {cursor_list}
WHERE c.queue = pool.queue
  AND c.tenant = ''
LIMIT 1

-- name: flat_open
-- The pick from the head reaches a queue only while it is not paused and no limit exists (see
-- flat_key): one-time conditions of its scan, as its guard.
NOT EXISTS (SELECT 1 FROM pgq.queue_pauses AS qp WHERE qp.queue = pool.queue)
AND (SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NULL
