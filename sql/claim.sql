-- The claim: one statement takes the next jobs of a pool's queues (supervisor.child.claimer).
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: claim
-- A worker's round trip, in one statement and so in one transaction with one commit: delete the
-- jobs it finished since its last claim, then claim the next batch across its pool's queues.
--
-- The claim's shape, in claim order (docs/claim-order.md), one CTE or LATERAL per step:
--   pool   the pool's queues in the order the weights chose (%(queues)s, smooth weighted
--          round-robin in the child), each with the tenant its rotation resumes at
--          (%(resume)s), in that order into the LATERAL (nothing may reorder them).
--   walk   per queue reached, the tenants that have available jobs, in tenant order from the
--          resume point, wrapping around once, at most %(limit)s of them: one probe of
--          jobs_claim_tenant per tenant visited, however many tenants wait or jobs each holds.
--          A paused queue stops at the walk's first step (one primary-key probe per queue
--          reached); a condition that skips a whole queue (a fleet-wide limit that is full)
--          goes beside it there, one that skips a tenant in the walk's probes.
--   quota  each tenant visited gives its weighted share of the batch, rounded up (weights from
--          the YAML's `tenants:` in %(tenant_*)s, 1 when not listed); a second pass takes more
--          from each only when the first left the batch short, so no due job waits idle.
--   pick   per tenant, its best due jobs (priority DESC, run_at, id: the index order after the
--          tenant, so no sort), locked with SKIP LOCKED, read from the key the walk's probe
--          found: the entries before it (consumed jobs a held xmin horizon keeps in the index)
--          are not read twice.
-- %(cursor_*)s: per (queue, tenant), the key of the last job this child claimed there
-- (supervisor/child/cursors.py), in tenant order; the walk probes such a tenant past its cursor,
-- so a claim does not read again what was consumed before it, however long a snapshot holds
-- the horizon. Empty arrays: every tenant from its head (the child's claim from the head, at
-- most a poll interval apart, which finds the jobs that arrived below a cursor).
-- Rows flow through the nested loops in that order and the statement stops at %(limit)s jobs,
-- so a queue is only reached when the ones before it could not fill the batch: the child puts
-- queues it found empty last (supervisor/child/weights.py), so the cost stays flat in the
-- number of queues and of tenants. Jobs without a tenant are the tenant ''.
--
-- The completion deletes the jobs in %(done_ids)s, fenced on (id, %(done_lease_ids)s) (empty
-- arrays when there are none); with %(history)s it writes a compact history row for each (with
-- the errors of its earlier attempts: null, and free, for a job that never failed). Only
-- running jobs have a lease_id (a table constraint), and the plan must look each id up by primary
-- key: psycopg prepares statements it runs often, and a generic plan for "state = 'running'"
-- would scan every running job for every id. A limit of 0 (or no queues) is a completion alone.
--
-- The claim takes one fresh fencing token for the whole batch; (id, lease_id) is the fence of
-- each job. Attempts are counted here, so a job that kills its worker every time still runs out
-- of attempts.
--
-- %(results)s is a JSON array of [id, value] pairs: what the finished jobs that returned
-- something returned ('[]' when none did), kept in pgq.job_results for the jobs still ours
-- (pgq.keep_results, called only when there is something to keep). A
-- finished job of a batch counts down its batch (pgq.batch_ended), which enqueues the batch's
-- `then` job when it was the last; jobs outside batches never call it.
--
-- Limits (docs/limits.md; a row in pgq.queue_limits, migrations 0013-0014). A queue with
-- limits claims only what they allow now: allowance takes its queue-wide room (free
-- concurrency slots, counting the jobs this statement completes as free, and rate tokens) under
-- the queue's mutex, and walk skips the queue when that is none; walk asks each tenant it
-- visits for its room under the per-tenant limits and steps over a tenant that has none (its
-- jobs wait, spending no attempt); capped keeps at most the queue's room of what next found;
-- then held_back gives back the queue tokens of jobs not claimed, takes the tenants' tokens
-- for the jobs claimed and says how long a claim that took nothing may sleep. A pool without
-- limits pays a probe of the small pgq.queue_limits per queue and nothing else; a database
-- without limits, one probe.
--
-- Rows: one per claimed job, then one last row whose final column holds the ids of the finished
-- jobs that were still ours (null when none was): a finished job missing from it had lost its
-- lease to another worker, and its result was dropped. Its column `limit_wait` is set when a
-- limit held every job back: the seconds until the next rate token promised to this claim is
-- due (the child may sleep that long); -1 when a queue-wide concurrency limit is full.
WITH done AS (
    -- By primary key, each id's lease looked up beside it: a join with the unnested pairs is
    -- hashed over the whole table in a generic plan made while the table was small.
    DELETE FROM pgq.jobs AS j
    WHERE j.id = ANY (%(done_ids)s::bigint[])
      AND j.lease_id = (%(done_lease_ids)s::bigint[])[
          array_position(%(done_ids)s::bigint[], j.id)]
    RETURNING j.id, j.queue, j.kind, j.attempts, j.created_at, j.started_at, j.errors, j.batch_id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, 'completed', attempts, created_at, started_at, now(), errors
    FROM done
    WHERE %(history)s
),
token AS (
    SELECT nextval('pgq.lease_seq') AS lease_id
),
allowance AS (
    -- The pool's queues with limits, each with what its queue-wide limits allow now, under its
    -- queue's mutex (pgq.limit_take_all, 0013). A pool without limits skips the call: one
    -- probe of the small pgq.queue_limits per queue, none at all on a database without limits
    -- (a pool of 1,000 queues spent 0.5 ms a claim on those probes).
    SELECT a.queue, a.allowed, a.wait, a.per_tenant, a.tenant_rated
    FROM pgq.limit_take_all(%(queues)s::text[], %(limit)s, %(done_ids)s::bigint[],
                            %(done_lease_ids)s::bigint[]) AS a
    -- Its first key, by the primary key (an EXISTS would drop the ORDER BY and LIMIT, and read
    -- the table instead).
    WHERE (SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NOT NULL
      AND EXISTS (
        SELECT 1
        FROM unnest(%(queues)s::text[]) AS q(queue)
        -- A probe of the primary key per queue (LIMIT: not flattened into a join).
        CROSS JOIN LATERAL (SELECT 1 FROM pgq.queue_limits AS l WHERE l.queue = q.queue LIMIT 1)
            AS hit
    )
),
next AS (
    SELECT pick.id, pool.queue, pick.nth
    -- Nothing may sit between the unnest and the LATERAL: the queues must reach it in the
    -- order given (a join with pgq.queue_pauses here was hashed in generic plans, which
    -- reordered them), so the pause check is the walk's first condition.
    FROM unnest(%(queues)s::text[], %(resume)s::text[]) AS pool(queue, resume)
    CROSS JOIN LATERAL (
        WITH RECURSIVE walk (pos, lap, step, tenant, kp, kr, ki, room, found, per_tenant) AS (
            -- Where the walk starts: the resume point, nothing visited yet (room 0).
            SELECT pool.resume COLLATE "C", 0, 0, NULL::text COLLATE "C", NULL::integer,
                   NULL::timestamptz, NULL::bigint, 0, 0, lim.per_tenant
            -- The queue's allowance (none: no limits), read by scalar subqueries here rather
            -- than joined to pool, for the same reason as the pause check.
            FROM (
                SELECT (SELECT a.allowed FROM allowance AS a WHERE a.queue = pool.queue)
                           AS allowed,
                       coalesce((SELECT a.per_tenant FROM allowance AS a
                                 WHERE a.queue = pool.queue), false) AS per_tenant
            ) AS lim
            WHERE NOT EXISTS (SELECT 1 FROM pgq.queue_pauses AS qp WHERE qp.queue = pool.queue)
              -- A queue at its queue-wide limit is skipped whole: no tenant, no probe of its jobs.
              AND lim.allowed IS DISTINCT FROM 0
            UNION ALL
            -- One step: the next tenant at or after pos with a job to visit (tenant set), or a
            -- step over a cursor's tenant that has none past its cursor, or (lap 0 found
            -- nothing more) the wrap to the first key. room: how many jobs the tenant may start
            -- now under the queue's per-tenant limits (pgq.tenant_room, 0013; the batch when
            -- the queue has none; 0 for a step that visits no one); found counts the tenants
            -- with room, so a tenant at its limit is stepped over, not counted.
            SELECT s.pos, s.lap, w.step + 1, s.tenant, s.kp, s.kr, s.ki, r.room,
                   w.found + (r.room > 0)::integer, w.per_tenant
            FROM walk AS w
            -- The child's cursor nearest ahead (the cursor's tenant, the key of the last job the
            -- child claimed there): in lap 1 only those before the resume point. The child sends
            -- them in tenant order (supervisor/child/cursors.py), so the first that qualifies is
            -- the nearest, with no sort.
            LEFT JOIN LATERAL (
                SELECT c.tenant COLLATE "C" AS tenant, c.priority, c.run_at, c.id
                FROM unnest(%(cursor_queues)s::text[], %(cursor_tenants)s::text[],
                            %(cursor_priorities)s::integer[], %(cursor_run_ats)s::timestamptz[],
                            %(cursor_ids)s::bigint[]) AS c(queue, tenant, priority, run_at, id)
                WHERE c.queue = pool.queue
                  AND c.tenant COLLATE "C" >= w.pos
                  AND (w.lap = 0 OR c.tenant COLLATE "C" < pool.resume)
                LIMIT 1
            ) AS k ON true
            CROSS JOIN LATERAL (
                -- Where this step's search for a tenant without a cursor ends: that cursor's
                -- tenant, else the lap's end (the resume point in lap 1; past every key in lap
                -- 0, as no tenant is longer than 200 characters: 0010's check).
                SELECT coalesce(least(k.tenant, CASE WHEN w.lap = 1 THEN pool.resume END),
                                repeat(chr(1114111), 201)) COLLATE "C" AS hi
            ) AS h
            CROSS JOIN LATERAL (
                -- A tenant without a cursor, before that end: probed from its first entry,
                -- which gives the key its pick starts at.
                (SELECT coalesce(j.tenant, '') COLLATE "C" AS tenant,
                        coalesce(j.tenant, '') || E'\x01' AS pos, w.lap AS lap,
                        j.priority::integer AS kp, j.run_at AS kr, j.id AS ki
                 FROM pgq.jobs AS j
                 WHERE j.state = 'available'
                   AND j.queue = pool.queue
                   AND coalesce(j.tenant, '') COLLATE "C" >= w.pos
                   AND coalesce(j.tenant, '') COLLATE "C" < h.hi
                 ORDER BY coalesce(j.tenant, '') COLLATE "C", j.priority DESC, j.run_at, j.id
                 LIMIT 1)
                UNION ALL
                -- The cursor's tenant: its first entry past the cursor (the same priority
                -- later, then lower priorities), never the consumed prefix before it.
                (SELECT k.tenant, k.tenant || E'\x01', w.lap, c.kp, c.kr, c.ki
                 FROM ((SELECT j.priority::integer AS kp, j.run_at AS kr, j.id AS ki
                        FROM pgq.jobs AS j
                        WHERE k.tenant IS NOT NULL
                          AND j.state = 'available'
                          AND j.queue = pool.queue
                          AND coalesce(j.tenant, '') COLLATE "C" = k.tenant
                          AND j.priority = k.priority
                          AND (j.run_at, j.id) > (k.run_at, k.id)
                        ORDER BY j.run_at, j.id
                        LIMIT 1)
                       UNION ALL
                       (SELECT j.priority, j.run_at, j.id
                        FROM pgq.jobs AS j
                        WHERE k.tenant IS NOT NULL
                          AND j.state = 'available'
                          AND j.queue = pool.queue
                          AND coalesce(j.tenant, '') COLLATE "C" = k.tenant
                          AND j.priority < k.priority
                        ORDER BY j.priority DESC, j.run_at, j.id
                        LIMIT 1)
                       LIMIT 1) AS c)
                UNION ALL
                -- Nothing past the cursor: step over its tenant.
                (SELECT NULL, k.tenant || E'\x01', w.lap, NULL, NULL, NULL
                 WHERE k.tenant IS NOT NULL)
                UNION ALL
                -- Lap 0 found nothing more: wrap to the first key (lap 1, up to the resume point).
                (SELECT NULL, '', 1, NULL, NULL, NULL
                 WHERE w.lap = 0 AND pool.resume <> '')
                LIMIT 1
            ) AS s
            CROSS JOIN LATERAL (
                SELECT CASE WHEN s.tenant IS NULL THEN 0
                            -- The tenant in the default collation: a "C" argument gives
                            -- the function's every text parameter "C" (a function's collation
                            -- is its arguments'), and its look-ups by queue could use no index.
                            WHEN w.per_tenant
                            THEN pgq.tenant_room(pool.queue, s.tenant COLLATE "default",
                                                 %(limit)s, %(done_ids)s::bigint[],
                                                 %(done_lease_ids)s::bigint[])
                            ELSE %(limit)s END AS room
            ) AS r
            WHERE w.found < %(limit)s
        ),
        quota AS (
            -- A tenant without room takes no share (and no job: its LIMITs are 0). Not a WHERE:
            -- a filter here changes the row estimates, and with them the pool's plan.
            SELECT w.step, w.tenant, w.room, w.kp, w.kr, w.ki,
                   least(w.room,
                         ceil(%(limit)s * coalesce(tw.weight, 1)::float8
                              / sum(coalesce(tw.weight, 1)) FILTER (WHERE w.room > 0) OVER ())
                   )::integer AS jobs
            FROM walk AS w
            LEFT JOIN unnest(%(tenant_queues)s::text[], %(tenant_names)s::text[],
                             %(tenant_weights)s::integer[]) AS tw(queue, tenant, weight)
                ON tw.queue = pool.queue
               AND tw.tenant = w.tenant
        )
        -- Pass 1: each tenant its share. Pass 2, only when pass 1 left the batch short (some
        -- tenants had fewer jobs than their share): more from each, past what pass 1 took.
        -- Each starts at the key the walk found (kp, kr, ki): the rest of that priority, then
        -- the lower ones, so no pick walks again what the walk's probe walked.
        -- nth: the order the walk found them in, which capped keeps (issue 30).
        SELECT u.id, row_number() OVER () AS nth
        FROM (
        SELECT p.id
        FROM quota AS v
        CROSS JOIN LATERAL (
            SELECT b.id
            FROM (SELECT * FROM (SELECT j.id
                                 FROM pgq.jobs AS j
                                 WHERE j.state = 'available'
                                   AND j.queue = pool.queue
                                   AND coalesce(j.tenant, '') COLLATE "C" = v.tenant
                                   AND j.priority = v.kp
                                   AND (j.run_at, j.id) >= (v.kr, v.ki)
                                   AND j.run_at <= now()
                                 ORDER BY j.run_at, j.id
                                 LIMIT v.jobs
                                 FOR UPDATE SKIP LOCKED) AS same
                  UNION ALL
                  SELECT * FROM (SELECT j.id
                                 FROM pgq.jobs AS j
                                 WHERE j.state = 'available'
                                   AND j.queue = pool.queue
                                   AND coalesce(j.tenant, '') COLLATE "C" = v.tenant
                                   AND j.priority < v.kp
                                   AND j.run_at <= now()
                                 ORDER BY j.priority DESC, j.run_at, j.id
                                 LIMIT v.jobs
                                 FOR UPDATE SKIP LOCKED) AS lower) AS b
            LIMIT v.jobs
        ) AS p
        UNION ALL
        SELECT p.id
        FROM quota AS v
        CROSS JOIN LATERAL (
            SELECT b.id
            FROM (SELECT * FROM (SELECT j.id
                                 FROM pgq.jobs AS j
                                 WHERE j.state = 'available'
                                   AND j.queue = pool.queue
                                   AND coalesce(j.tenant, '') COLLATE "C" = v.tenant
                                   AND j.priority = v.kp
                                   AND (j.run_at, j.id) >= (v.kr, v.ki)
                                   AND j.run_at <= now()
                                 ORDER BY j.run_at, j.id
                                 LIMIT v.room
                                 FOR UPDATE SKIP LOCKED) AS same
                  UNION ALL
                  SELECT * FROM (SELECT j.id
                                 FROM pgq.jobs AS j
                                 WHERE j.state = 'available'
                                   AND j.queue = pool.queue
                                   AND coalesce(j.tenant, '') COLLATE "C" = v.tenant
                                   AND j.priority < v.kp
                                   AND j.run_at <= now()
                                 ORDER BY j.priority DESC, j.run_at, j.id
                                 LIMIT v.room
                                 FOR UPDATE SKIP LOCKED) AS lower) AS b
            OFFSET v.jobs
            LIMIT v.room - v.jobs
        ) AS p
        ) AS u
    ) AS pick
    LIMIT %(limit)s
),
capped AS (
    -- At most what each queue's queue-wide limits allow: the rest of what next locked stays
    -- available (its row locks end with this short transaction). Applied here, not inside
    -- next, because a LIMIT there changes the planner's row estimates and with them the plan
    -- of the pause check (a hash join that could lose the weights' order).
    SELECT n.id
    FROM next AS n
    WHERE NOT EXISTS (SELECT 1 FROM allowance AS a WHERE a.queue = n.queue)
    UNION ALL
    SELECT x.id
    FROM allowance AS a
    -- The first of what the walk found, in its order (nth). A bare LIMIT kept any of the
    -- locked rows: a tenant's later job before its earlier one, whose cursor then moved past
    -- the earlier one, left waiting until the rotation came round again (issue 30).
    CROSS JOIN LATERAL (SELECT n.id FROM next AS n WHERE n.queue = a.queue AND n.nth <= a.allowed)
        AS x
),
claimed AS (
    UPDATE pgq.jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        lease_id = token.lease_id,
        locked_by = %(worker)s,
        lease_until = now() + make_interval(secs => %(lease_seconds)s::float8),
        started_at = now()
    FROM token
    -- By primary key, for as many ids as `next` found. A join against `next` would do, but a
    -- prepared statement's generic plan takes LIMIT %(limit)s for a tenth of the table and hashes
    -- the whole table to join it; PostgreSQL then plans the statement afresh at every run
    -- instead (0.6 ms of planning per claim). = ANY keeps the generic plan to index look-ups.
    WHERE j.id = ANY (ARRAY(SELECT id FROM capped))
    RETURNING j.id, j.queue, j.kind, j.args, j.priority, j.run_at, j.attempts, j.max_attempts,
              j.lease_id, j.lease_until, j.created_at, j.batch, j.traceparent, j.tenant
),
held_back AS (
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
)
SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, lease_id, lease_until,
       created_at, batch, traceparent, tenant, NULL::bigint[] AS completed,
       NULL::float8 AS limit_wait
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       d.ids, (SELECT wait FROM held_back)
-- The finished jobs' results and batch counts ride on this last row, read once from `done`:
-- pgq.keep_results only when some job returned something, pgq.batch_ended only when some job
-- belongs to a batch, so a plain completion calls neither. They run after the claim (so the
-- batch counters' row locks are held for the commit alone), and the claim's own text stays
-- within the 1,024 characters pg_stat_activity keeps of a query.
FROM (
    SELECT array_agg(id) AS ids,
           array_agg(kind) AS kinds,
           array_agg(attempts) AS attempts,
           array_agg(id) FILTER (WHERE batch_id IS NOT NULL) AS members,
           array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL) AS batches
    FROM done
) AS d
CROSS JOIN LATERAL (
    SELECT CASE
               WHEN d.ids IS NOT NULL AND %(results)s::text <> '[]'
               THEN pgq.keep_results(d.ids, d.kinds, d.attempts, %(results)s::jsonb)
           END AS kept,
           CASE
               WHEN d.members IS NOT NULL
               THEN pgq.batch_ended(d.members, d.batches,
                                    array_fill('completed'::text, ARRAY[cardinality(d.members)]))
           END AS ended
) AS side;
