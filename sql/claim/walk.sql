-- The walk: per queue reached, the tenants that have available jobs, in tenant order from the
-- resume point (%(resume)s), wrapping around once, at most %(limit)s of them: one probe of
-- jobs_claim_tenant per tenant visited, however many tenants wait or jobs each holds. A paused
-- queue stops at the walk's first step (one primary-key probe per queue reached); a condition
-- that skips a whole queue (a fleet-wide limit that is full) goes beside it there, one that
-- skips a tenant in the walk's probes.
--
-- %(cursor_*)s: per (queue, tenant), the key of the last job this child claimed there
-- (supervisor/child/cursors.py), in tenant order; the walk probes such a tenant past its cursor,
-- so a claim does not read again what was consumed before it, however long a snapshot holds the
-- horizon. Empty arrays: every tenant from its head (the child's claim from the head, at most a
-- poll interval apart, which finds the jobs that arrived below a cursor).

-- name: walk
-- Where the walk starts: the resume point, nothing visited yet (room 0); a queue at its
-- queue-wide limit is skipped whole (no tenant, no probe of its jobs). Then one step: the next
-- tenant at or after pos with a job to visit (tenant set), or a step over a cursor's tenant that
-- has none past its cursor, or (lap 0 found nothing more) the wrap to the first key. room: how
-- many jobs the tenant may start now; found counts the tenants with room, so a tenant at its
-- limit is stepped over, not counted.
SELECT pool.resume COLLATE "C", 0, 0, NULL::text COLLATE "C", NULL::integer,
       NULL::timestamptz, NULL::bigint, 0, 0, lim.per_tenant
FROM (
    {queue_allowance}
) AS lim
WHERE NOT EXISTS (SELECT 1 FROM pgq.queue_pauses AS qp WHERE qp.queue = pool.queue)
  AND lim.allowed IS DISTINCT FROM 0
UNION ALL
SELECT s.pos, s.lap, w.step + 1, s.tenant, s.kp, s.kr, s.ki, r.room,
       w.found + (r.room > 0)::integer, w.per_tenant
FROM walk AS w
LEFT JOIN LATERAL (
    {cursor}
) AS k ON true
CROSS JOIN LATERAL (
    {probe_end}
) AS h
CROSS JOIN LATERAL (
    {probe}
) AS s
CROSS JOIN LATERAL (
    {tenant_room}
) AS r
WHERE w.found < %(limit)s

-- name: cursor
-- The child's cursor nearest ahead (the cursor's tenant, the key of the last job the child
-- claimed there): in lap 1 only those before the resume point. The child sends them in tenant
-- order (supervisor/child/cursors.py), so the first that qualifies is the nearest, with no sort.
SELECT c.tenant COLLATE "C" AS tenant, c.priority, c.run_at, c.id
FROM {cursor_list}
WHERE c.queue = pool.queue
  AND c.tenant COLLATE "C" >= w.pos
  AND (w.lap = 0 OR c.tenant COLLATE "C" < pool.resume)
LIMIT 1

-- name: cursor_list
-- The child's cursors, as rows (queue, tenant, priority, run_at, id); aligned for its place
-- after a FROM.
unnest(%(cursor_queues)s::text[], %(cursor_tenants)s::text[],
            %(cursor_priorities)s::integer[], %(cursor_run_ats)s::timestamptz[],
            %(cursor_ids)s::bigint[]) AS c(queue, tenant, priority, run_at, id)

-- name: probe_end
-- Where this step's search for a tenant without a cursor ends: that cursor's tenant, else the
-- lap's end (the resume point in lap 1; past every key in lap 0, as no tenant is longer than
-- 200 characters: 0010's check).
SELECT coalesce(least(k.tenant, CASE WHEN w.lap = 1 THEN pool.resume END),
                repeat(chr(1114111), 201)) COLLATE "C" AS hi

-- name: probe
-- A tenant without a cursor, before that end: probed from its first entry, which gives the key
-- its pick starts at. Then the cursor's tenant: its first entry past the cursor (the same
-- priority later, then lower priorities), never the consumed prefix before it. Then, nothing
-- past the cursor: step over its tenant. Then, lap 0 found nothing more: wrap to the first key
-- (lap 1, up to the resume point).
(SELECT coalesce(j.tenant, '') COLLATE "C" AS tenant,
        coalesce(j.tenant, '') || E'\x01' AS pos, w.lap AS lap,
        j.priority::integer AS kp, j.run_at AS kr, j.id AS ki
 FROM pgq.jobs AS j
 WHERE j.state = 'available'
   AND j.queue = pool.queue
   AND {tenant_key} >= w.pos
   AND {tenant_key} < h.hi
 ORDER BY {tenant_key}, {claim_order}
 LIMIT 1)
UNION ALL
(SELECT k.tenant, k.tenant || E'\x01', w.lap, c.kp, c.kr, c.ki
 FROM (({past_cursor_same})
       UNION ALL
       ({past_cursor_lower})
       LIMIT 1) AS c)
UNION ALL
(SELECT NULL, k.tenant || E'\x01', w.lap, NULL, NULL, NULL
 WHERE k.tenant IS NOT NULL)
UNION ALL
(SELECT NULL, '', 1, NULL, NULL, NULL
 WHERE w.lap = 0 AND pool.resume <> '')
LIMIT 1
