-- Priority aging (issue 33; YAML `aging:`): in a queue whose jobs age every %(aging)s seconds
-- (pool.aging, per queue; 0: off), a due job rises one priority level per period it has waited
-- past its run_at, never past its tenant's highest waiting priority (the claim compares jobs
-- only inside a tenant: across tenants it shares fairly), and among equal effective priorities
-- the earlier run_at goes first. Nothing is written while a job waits and no index moves: the
-- effective priority is computed from run_at at the claim, as
-- least(priority + floor((now() - run_at) / every), top).
--
-- Why the index still serves it: inside one priority level the oldest run_at has the highest
-- effective priority, so the best jobs of a tenant are among the heads of its levels. The pick
-- finds the levels by a skip scan of jobs_claim_tenant (one probe per distinct priority the
-- tenant holds), reads at most {take} heads of each in index order, and sorts only those:
-- levels x batch rows, whatever the number of jobs waiting. A queue without aging never runs
-- this (pool.aging = 0 is a one-time filter), and its pick is the plain one.
--
-- Each level's heads are locked as they are read (SKIP LOCKED), so up to levels x batch rows
-- are locked for the statement's duration while at most a batch is claimed; a concurrent claim
-- skips the others until this one commits. Cursors: a child sends none for an aged queue
-- (supervisor/child/claimer.py), as aging takes jobs out of index order.

-- name: aged_pick
-- The tenant v's best {take} due jobs by effective priority, locked: the rest of the pick's
-- UNION ALL when the queue ages (the plain pick runs when it does not).
SELECT a.id
FROM (
    WITH RECURSIVE levels (p) AS (
        (SELECT j.priority
         FROM pgq.jobs AS j
         WHERE j.state = 'available'
           AND j.queue = pool.queue
           AND {tenant_key} = v.tenant
         ORDER BY j.priority DESC
         LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority
                FROM pgq.jobs AS j
                WHERE j.state = 'available'
                  AND j.queue = pool.queue
                  AND {tenant_key} = v.tenant
                  AND j.priority < l.p
                ORDER BY j.priority DESC
                LIMIT 1)
        FROM levels AS l
        WHERE l.p IS NOT NULL
    )
    SELECT h.id, h.priority, h.run_at, (SELECT max(t.p) FROM levels AS t) AS top
    FROM levels AS l
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at
        FROM pgq.jobs AS j
        WHERE j.state = 'available'
          AND j.queue = pool.queue
          AND {tenant_key} = v.tenant
          AND j.priority = l.p
          AND j.run_at <= now()
        ORDER BY {within_priority}
        LIMIT {take}
        FOR UPDATE SKIP LOCKED
    ) AS h
    WHERE l.p IS NOT NULL
) AS a
ORDER BY {aged_priority} DESC, a.run_at, a.id
LIMIT {take}

-- name: aged_priority
-- A job's effective priority under aging (a is the aged pick's row: priority, run_at, top).
least(a.priority + floor(extract(epoch FROM now() - a.run_at) / pool.aging), a.top)

-- name: pick_or_aged
-- The pick of tenant v: the plain one (order.sql's halves, from the walk's key) in a queue that
-- does not age, the aged one in a queue that does; each behind a one-time filter on pool.aging.
(SELECT p.id
 FROM ({plain}) AS p
 WHERE pool.aging = 0)
UNION ALL
(SELECT g.id
 FROM ({aged}) AS g
 WHERE pool.aging > 0)
