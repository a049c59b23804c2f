-- Limits (docs/limits.md; a row in pgq.queue_limits, migrations 0013-0014). A queue with limits
-- claims only what they allow now: the allowance takes its queue-wide room (free concurrency
-- slots, counting the jobs this statement completes as free, and rate tokens) under the queue's
-- mutex, and the walk skips the queue when that is none; the walk asks each tenant it visits
-- for its room under the per-tenant limits and steps over a tenant that has none (its jobs
-- wait, spending no attempt); the caps keep at most the queue's room of what the pick found;
-- then held_back gives back the queue tokens of jobs not claimed, takes the tenants' tokens for
-- the jobs claimed and says how long a claim that took nothing may sleep.

-- name: allowance
-- The pool's queues with limits, each with what its queue-wide limits allow now, under its
-- queue's mutex (pgq.limit_take_all, 0013). A pool without limits skips the call: one probe of
-- the small pgq.queue_limits per queue, none at all on a database without limits (a pool of
-- 1,000 queues spent 0.5 ms a claim on those probes). Its first key by the primary key (an
-- EXISTS would drop the ORDER BY and LIMIT, and read the table instead); then a probe of the
-- primary key per queue (LIMIT: not flattened into a join).
SELECT a.queue, a.allowed, a.wait, a.per_tenant, a.tenant_rated
FROM pgq.limit_take_all(%(queues)s::text[], %(limit)s, %(done_ids)s::bigint[],
                        %(done_lease_ids)s::bigint[]) AS a
WHERE (SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NOT NULL
  AND EXISTS (
    SELECT 1
    FROM unnest(%(queues)s::text[]) AS q(queue)
    CROSS JOIN LATERAL (SELECT 1 FROM pgq.queue_limits AS l WHERE l.queue = q.queue LIMIT 1)
        AS hit
)

-- name: queue_allowance
-- The walk's start: the queue's allowance (none: no limits), read by scalar subqueries rather
-- than joined to pool, for the same reason as the pause check (see pick.sql, next).
SELECT (SELECT a.allowed FROM allowance AS a WHERE a.queue = pool.queue)
           AS allowed,
       coalesce((SELECT a.per_tenant FROM allowance AS a
                 WHERE a.queue = pool.queue), false) AS per_tenant

-- name: tenant_room
-- How many jobs a tenant the walk visits may start now under the queue's per-tenant limits
-- (pgq.tenant_room, 0013; the batch when the queue has none; 0 for a step that visits no one).
-- The tenant in the default collation: a "C" argument gives the function's every text
-- parameter "C" (a function's collation is its arguments'), and its look-ups by queue could use
-- no index.
SELECT CASE WHEN s.tenant IS NULL THEN 0
            WHEN w.per_tenant
            THEN pgq.tenant_room(pool.queue, s.tenant COLLATE "default",
                                 %(limit)s, %(done_ids)s::bigint[],
                                 %(done_lease_ids)s::bigint[])
            ELSE %(limit)s END AS room

-- name: capped
-- At most what each queue's queue-wide limits allow: the rest of what next locked stays
-- available (its row locks end with this short transaction). Applied here, not inside next,
-- because a LIMIT there changes the planner's row estimates and with them the plan of the pause
-- check (a hash join that could lose the weights' order). The first of what the walk found, in
-- its order (nth, pick.sql's numbered): a bare LIMIT kept any of the locked rows, a tenant's
-- later job before its earlier one, whose cursor then moved past the earlier one, left waiting
-- until the rotation came round again (issue 30).
SELECT n.id
FROM next AS n
WHERE NOT EXISTS (SELECT 1 FROM allowance AS a WHERE a.queue = n.queue)
UNION ALL
SELECT x.id
FROM allowance AS a
CROSS JOIN LATERAL (SELECT n.id FROM next AS n WHERE n.queue = a.queue AND n.nth <= a.allowed)
    AS x

-- name: held_back
-- The limits' accounts settled (pgq.limit_finish, 0013): the queues' unused tokens back, the
-- tenants' tokens taken, and how long the limits hold a claim that took nothing back.
SELECT CASE WHEN EXISTS (SELECT 1 FROM allowance) THEN pgq.limit_finish(
    ARRAY(SELECT a.queue FROM allowance AS a),
    ARRAY(SELECT a.allowed FROM allowance AS a),
    ARRAY(SELECT a.wait FROM allowance AS a),
    ARRAY(SELECT a.queue FROM allowance AS a WHERE a.tenant_rated),
    ARRAY(SELECT c.queue FROM claimed AS c),
    ARRAY(SELECT coalesce(c.tenant, '') FROM claimed AS c)
) END AS wait

-- name: no_limits
-- The claim without limits (claim_builder's variant "unlimited", for a database whose
-- pgq.queue_limits is empty): its walk starts only while that table is still empty, one probe
-- of its first key per claim; a claim that finds a limit written since takes nothing and says
-- so in its reply's limits column, and the child sends the claim with limits from then on.
SELECT NULL::integer AS allowed, false AS per_tenant
WHERE (SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NULL

-- name: unlimited_room
-- A tenant the walk visits may start a whole batch (0 for a step that visits no one).
SELECT CASE WHEN s.tenant IS NULL THEN 0 ELSE %(limit)s END AS room

-- name: limits_found
-- The reply's limits column in the claim without limits: whether a limit exists now.
(SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NOT NULL
