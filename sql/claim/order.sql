-- The claim order, written once: inside a queue, tenant by tenant (byte order of the tenant key,
-- jobs without a tenant are the tenant ''), then the best priority, the oldest run_at, the
-- lowest id. The index jobs_claim_tenant (queue, tenant key, priority DESC, run_at, id, on
-- available jobs) is this order, so neither the walk nor the pick sorts. A change of the order
-- is a change of this file (and of that index, in a migration).

-- name: tenant_key
-- A job's tenant as the claim compares it: '' for none, in "C" so that the index's order and
-- the walk's comparisons (>=, <) agree byte for byte.
coalesce(j.tenant, '') COLLATE "C"

-- name: in_tenant
-- The condition that keeps a half of the order (below) inside the tenant {tenant}.
AND {tenant_key} = {tenant}

-- name: claim_order
-- The order inside one tenant.
j.priority DESC, j.run_at, j.id

-- name: within_priority
-- The order inside one priority of one tenant: claim_order past its first column.
j.run_at, j.id

-- name: same_priority
-- A tenant's jobs at the priority of a key ({priority}, {run_at}, {id}), from that key on
-- ({past}: > after it, >= from it), in claim order: the first half of "the rest of a tenant
-- from a key". {guard} and {due} add a condition before and after; {lock} ends the query.
-- {in_tenant}: the tenant's condition (in_tenant below); empty in the flat claim (flat.sql),
-- which reads the queue's jobs of every tenant in this order (the index jobs_claim).
SELECT {columns}
FROM pgq.jobs AS j
WHERE {guard}j.state = 'available'
  AND j.queue = pool.queue{in_tenant}
  AND j.priority = {priority}
  AND (j.run_at, j.id) {past} ({run_at}, {id}){due}
ORDER BY {within_priority}
LIMIT {take}{lock}

-- name: lower_priorities
-- The second half: the tenant's jobs below that priority, in claim order.
SELECT {columns}
FROM pgq.jobs AS j
WHERE {guard}j.state = 'available'
  AND j.queue = pool.queue{in_tenant}
  AND j.priority < {priority}{due}
ORDER BY {claim_order}
LIMIT {take}{lock}
