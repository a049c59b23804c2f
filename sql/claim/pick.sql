-- The pick: per tenant the walk visited, its best due jobs in claim order (the index order
-- after the tenant, so no sort), locked with SKIP LOCKED, read from the key the walk's probe
-- found (kp, kr, ki): the rest of that priority, then the lower ones. The entries before that
-- key (consumed jobs a held xmin horizon keeps in the index) are not read twice.
--
-- Rows flow through the nested loops in the pool's order and the statement stops at %(limit)s
-- jobs, so a queue is only reached when the ones before it could not fill the batch: the child
-- puts queues it found empty last (supervisor/child/weights.py), so the cost stays flat in the
-- number of queues and of tenants.

-- name: next
-- The pool's queues in the order the weights chose (%(queues)s, smooth weighted round-robin in
-- the child), each with the tenant its rotation resumes at (%(resume)s) and the seconds its
-- jobs take to age a priority level (%(aging)s, 0: no aging; aging.sql). Nothing may sit
-- between the unnest and the LATERAL: the queues must reach it in the order given (a join with
-- pgq.queue_pauses here was hashed in generic plans, which reordered them), so the pause check
-- is the walk's first condition.
SELECT pick.id, pool.queue{nth}
FROM unnest(%(queues)s::text[], %(resume)s::text[],
            %(aging)s::float8[]) AS pool(queue, resume, aging)
CROSS JOIN LATERAL (
    WITH RECURSIVE walk (pos, lap, step, tenant, kp, kr, ki, room, found, per_tenant) AS (
        {walk}
    ),
    quota AS (
        {quota}
    )
    {passes}
) AS pick
LIMIT %(limit)s

-- name: numbered
-- The picks numbered in the order the walk found them (no sort: row_number over the passes'
-- UNION ALL as it flows), for the caps of a queue with limits, which keep the first (issue 30).
SELECT u.id, row_number() OVER () AS nth
FROM (
    {passes}
) AS u

-- name: first_pass
-- Pass 1: each tenant its share.
SELECT p.id
FROM quota AS v
CROSS JOIN LATERAL (
    {pick_jobs}
    LIMIT v.jobs
) AS p

-- name: passes
-- Pass 2, only when pass 1 left the batch short (some tenants had fewer jobs than their share):
-- more from each, past what pass 1 took. A batch of one has no use for it (claim_builder).
{first_pass}
UNION ALL
SELECT p.id
FROM quota AS v
CROSS JOIN LATERAL (
    {pick_room}
    OFFSET v.jobs
    LIMIT v.room - v.jobs
) AS p

-- name: pick
-- The rest of the tenant v from the walk's key, due now, locked: {same} and {lower} are
-- order.sql's two halves.
SELECT b.id
FROM (SELECT * FROM ({same}) AS same
      UNION ALL
      SELECT * FROM ({lower}) AS lower) AS b
