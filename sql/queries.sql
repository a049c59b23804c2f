-- Named queries, loaded once by supervisor/queries.py into a dict.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: enqueue
-- Inserts one job through the caller's connection. A unique key that is already held by a
-- waiting (available or scheduled) or running job inserts nothing and returns no row. A job
-- due later is written 'scheduled', outside the claim index, and wakes the masters' stagers
-- (pgq_scheduled) when it is due before their next look (pgq.wakes_stagers, 0036: within 10
-- s; they look once a second anyway); a job due now wakes its queue's workers (pgq_jobs), but
-- only when a master has raised the queue's flag in pgq.queue_wakeups (it has a child asleep
-- for it): an index probe finds whether one is up, and only then pgq.take_wakeups takes every
-- raised flag no other transaction holds and notifies if it took one, so concurrent producers
-- do not each take NOTIFY's database-wide commit lock (migration 0021).
-- NOTIFY deduplicates identical payloads within a transaction.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, unique_key,
                          traceparent, tenant)
    SELECT
        %(queue)s::text,
        %(kind)s::text,
        %(args)s::jsonb,
        %(priority)s::smallint,
        t.run_at,
        CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
        %(max_attempts)s::integer,
        %(unique_key)s::text,
        %(traceparent)s::text,
        %(tenant)s::text
    FROM (
        SELECT coalesce(%(run_at)s::timestamptz,
                        now() + make_interval(secs => %(delay)s::float8)) AS run_at
    ) AS t
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
    DO NOTHING
    RETURNING id, queue, state, run_at
)
SELECT
    id,
    CASE
        WHEN NOT %(notify)s THEN NULL
        WHEN state = 'scheduled'
            THEN CASE WHEN pgq.wakes_stagers(run_at) THEN pg_notify('pgq_scheduled', '') IS NULL
                 END
        WHEN EXISTS (SELECT FROM pgq.queue_wakeups AS f
                     WHERE f.queue = inserted.queue AND f.wanted)
            THEN pgq.take_wakeups(queue)
    END
FROM inserted;

-- name: job_by_unique_key
-- The job that holds a unique key, when an enqueue with that key inserted nothing.
SELECT id
FROM pgq.jobs
WHERE unique_key = %(unique_key)s
  AND state IN ('available', 'running', 'scheduled');

-- name: jobs_by_unique_keys
-- The jobs that hold any of these unique keys (bulk enqueue's duplicates).
SELECT unique_key, id
FROM pgq.jobs
WHERE unique_key = ANY(%(unique_keys)s::text[])
  AND state IN ('available', 'running', 'scheduled');

-- name: enqueue_many
-- Inserts many jobs in one statement from parallel arrays. Duplicated unique keys insert
-- nothing. Jobs due later are written 'scheduled', like enqueue. The rows go in by unique key
-- (rows without one last, in input order; RETURNING follows the insert order, which follows
-- the ORDER BY, and the final SELECT reads the CTE in that order): two calls with the same keys
-- in different orders then wait for each other's keys in the same order instead of
-- deadlocking; the caller maps the ids back by key. Each returned row says its queue and
-- whether it waits for later and is due before the stagers' next look. With %(notify)s, the
-- queues that received due jobs are woken as in enqueue (a probe for a raised flag, then
-- pgq.take_wakeups), in this same statement (no second round trip).
-- The arguments travel as one JSON array rather than a jsonb[]: a text array would quote and
-- escape every object, which cost more than the insert itself.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, unique_key,
                          traceparent, tenant)
    SELECT
        t.queue,
        t.kind,
        t.args,
        t.priority,
        r.run_at,
        CASE WHEN r.run_at > now() THEN 'scheduled' ELSE 'available' END,
        t.max_attempts,
        t.unique_key,
        t.traceparent,
        t.tenant
    FROM ROWS FROM (
        unnest(%(queues)s::text[]),
        unnest(%(kinds)s::text[]),
        jsonb_array_elements(%(args)s::jsonb),
        unnest(%(priorities)s::smallint[]),
        unnest(%(run_ats)s::timestamptz[]),
        unnest(%(delays)s::float8[]),
        unnest(%(max_attempts)s::integer[]),
        unnest(%(unique_keys)s::text[]),
        unnest(%(traceparents)s::text[]),
        unnest(%(tenants)s::text[])
    ) WITH ORDINALITY AS t(queue, kind, args, priority, run_at, delay, max_attempts, unique_key,
                           traceparent, tenant, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(t.run_at, now() + make_interval(secs => t.delay)) AS run_at
    ) AS r
    ORDER BY t.unique_key COLLATE "C" NULLS LAST, t.ord
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
    DO NOTHING
    RETURNING id, unique_key, state, queue, run_at
)
SELECT
    id,
    unique_key,
    queue,
    -- Due later, before the stagers' next look: the caller wakes them (pgq.wakes_stagers).
    state = 'scheduled' AND pgq.wakes_stagers(run_at) AS wakes_stagers,
    (SELECT count(*) FILTER (WHERE pgq.take_wakeups(q))
     FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS d(q)
     WHERE %(notify)s
       AND EXISTS (SELECT FROM pgq.queue_wakeups AS f WHERE f.queue = d.q AND f.wanted))
FROM inserted;

-- name: notify_queues
-- One wake-up per queue in %(queues)s, unconditional: for the operator's verbs (a replay), which
-- are rare and must wake every host whatever its flags say.
SELECT pg_notify('pgq_jobs', q)
FROM unnest(%(queues)s::text[]) AS q;

-- name: notify_scheduled
-- Wakes the masters' stagers after jobs were scheduled for later: each reads the earliest
-- run_at again and sleeps until then.
SELECT pg_notify('pgq_scheduled', '');

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
    SELECT pick.id, pool.queue
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
    CROSS JOIN LATERAL (SELECT n.id FROM next AS n WHERE n.queue = a.queue LIMIT a.allowed) AS x
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

-- name: settle
-- Records every outcome other than success for claimed jobs, fenced on (id, lease_id): back to
-- available after a delay (retry, snooze), back to available at its old run_at (release), or
-- discarded with its reason (the dead-letter queue). %(refunds)s gives an attempt back (snooze,
-- release); a null delay keeps run_at; a null error keeps the previous one, and an error is
-- also appended to the job's errors (pgq.error_kept: the most recent 25). Returns the ids that
-- were still ours. With %(history)s, discards also write a history row. Fenced by lease_id alone,
-- like complete, so the plan looks jobs up by primary key. A job with a cancel request
-- (pgq.cancel) that would go back to available ends 'cancelled' instead: it never runs again.
-- %(states)s may also say 'cancelled' itself (a threaded handler that saw the request), or
-- 'unknown' (an attempt of a kind with effects outside the database that timed out: due for its
-- reconcile hook at once, not finished). Discarded and cancelled members count down their batch.
WITH settled AS (
    UPDATE pgq.jobs AS j
    -- A retry or snooze for later waits as 'scheduled', outside the claim index.
    SET state = CASE
            WHEN o.state = 'available' AND j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN o.state = 'available' AND o.delay > 0 THEN 'scheduled'
            ELSE o.state
        END,
        run_at = CASE
            WHEN o.delay IS NULL THEN j.run_at
            ELSE now() + make_interval(secs => o.delay)
        END,
        attempts = j.attempts - o.refund,
        last_error = coalesce(o.error, j.last_error),
        errors = pgq.error_kept(j.errors, j.attempts, o.error),
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN o.state = 'unknown' THEN NULL
            WHEN o.state <> 'available' OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM unnest(
        %(ids)s::bigint[],
        %(lease_ids)s::bigint[],
        %(states)s::text[],
        %(delays)s::float8[],
        %(refunds)s::integer[],
        %(errors)s::text[]
    ) AS o(id, lease_id, state, delay, refund, error)
    -- = ANY: the primary key's look-ups even in a generic plan made while the table was
    -- small (a join alone was hashed over the whole table).
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND j.id = o.id
      AND j.lease_id = o.lease_id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM settled
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM settled
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT s.id
FROM settled AS s
CROSS JOIN (SELECT count(*) FROM ended) AS e;

-- name: renew_leases
-- Extends the leases of claimed jobs, fenced on (id, lease_id) alone
-- (see complete); returns the ids still held.
UPDATE pgq.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease_seconds)s::float8)
FROM unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS f(id, lease_id)
WHERE j.id = f.id
  AND j.lease_id = f.lease_id
RETURNING j.id;

-- name: renew_worker_leases
-- Extends the leases of every job held by these workers (identities are never reused, so a job
-- re-claimed by anyone else no longer matches). One statement per interval for a whole host.
UPDATE pgq.jobs
SET lease_until = now() + make_interval(secs => %(lease_seconds)s::float8)
WHERE state = 'running'
  AND locked_by = ANY(%(workers)s::text[]);

-- name: lease_held
-- Whether a claimed job is still ours and its lease has not run out.
SELECT EXISTS (
    SELECT 1
    FROM pgq.jobs
    WHERE id = %(id)s
      AND lease_id = %(lease_id)s
      AND state = 'running'
      AND lease_until > now()
);

-- name: requeue_worker
-- Gives back every job held by a worker that is known to be gone (its process exited), or,
-- for a live worker that reconnected, every job it holds but not those in %(keep)s (the rest
-- were claimed as its old connection died, and it never received them). A job
-- in %(spent)s was running when the worker died: its attempt stays spent, since it may be what
-- killed the worker, and it is discarded when out of attempts. The worker's other jobs were
-- claimed but not started (or finished but not yet recorded): they get their attempt back.
-- A spent attempt records %(reason)s in last_error and appends it to errors.
-- %(policy_kinds)s / %(policy_max_attempts)s carry the operator's per-kind max_attempts, which
-- win over the row's own. A job with a cancel request ends 'cancelled' (the master stops a child
-- to cancel its job, and this is how that job's claim ends).
-- Outcome unknown: a job that started (in %(spent)s or %(started)s: it ran, whether or not it
-- finished) of a kind with effects outside the database (in %(external_kinds)s, from this
-- supervisor's YAML, or declared by any live supervisor: pgq.supervisors.external_kinds) may
-- have done its effect; it goes to 'unknown' with the reason, its attempt spent, instead of
-- running again. Discarded and cancelled members count down their batch.
WITH target AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'running'
      AND locked_by = %(worker)s
      AND id <> ALL(%(keep)s::bigint[])
    FOR UPDATE
),
decided AS (
    SELECT j.id,
           s.spent,
           s.spent AND j.attempts >= coalesce(p.max_attempts, j.max_attempts) AS exhausted,
           (s.spent OR j.id = ANY(%(started)s::bigint[]))
               AND (j.kind = ANY(%(external_kinds)s::text[])
                    OR EXISTS (SELECT 1
                               FROM pgq.supervisors AS v
                               WHERE j.kind = ANY(v.external_kinds))) AS unknown
    FROM pgq.jobs AS j
    JOIN target USING (id)
    -- A null %(spent)s: nobody knows which jobs were running, so every attempt counts.
    CROSS JOIN LATERAL (
        SELECT coalesce(j.id = ANY(%(spent)s::bigint[]), true) AS spent
    ) AS s
    LEFT JOIN unnest(%(policy_kinds)s::text[], %(policy_max_attempts)s::integer[])
        AS p(kind, max_attempts) ON p.kind = j.kind
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = CASE
            WHEN d.unknown THEN 'unknown'
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN d.exhausted THEN 'discarded'
            ELSE 'available'
        END,
        run_at = now(),
        attempts = CASE WHEN d.spent OR d.unknown THEN j.attempts ELSE j.attempts - 1 END,
        last_error = CASE
            WHEN d.unknown THEN 'outcome unknown (effects: external): ' || %(reason)s
            WHEN d.spent THEN %(reason)s
            ELSE j.last_error
        END,
        errors = CASE
            WHEN d.unknown THEN pgq.error_kept(j.errors, j.attempts,
                                               'outcome unknown (effects: external): '
                                               || %(reason)s)
            WHEN d.spent THEN pgq.error_kept(j.errors, j.attempts, %(reason)s)
            ELSE j.errors
        END,
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN d.unknown THEN NULL
            WHEN d.exhausted OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM decided AS d
    WHERE j.id = d.id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM moved
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM moved
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT m.id, m.queue, m.kind, m.state, m.attempts
FROM moved AS m
CROSS JOIN (SELECT count(*) FROM ended) AS e;

-- name: rescue
-- Returns up to %(limit)s jobs whose lease expired (their worker stopped renewing: a host that
-- died, a network partition) to available, or to discarded when no attempts are left.
-- SKIP LOCKED lets it run beside claims and finishes without waiting on them. A job with a
-- cancel request ends 'cancelled'. The expiry is recorded in last_error and appended to errors.
-- A job of a kind with effects outside the database (%(external_kinds)s, or declared by any
-- live supervisor) goes to 'unknown' instead: nobody knows how far its attempt got.
-- Discarded and cancelled members count down their batch.
WITH target AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'running'
      AND lease_until < now()
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
decided AS (
    SELECT j.id,
           j.attempts >= coalesce(p.max_attempts, j.max_attempts) AS exhausted,
           x.unknown,
           CASE WHEN x.unknown THEN 'outcome unknown (effects: external): ' ELSE '' END
               || 'lease expired: worker ' || j.locked_by || ' stopped renewing it' AS error
    FROM pgq.jobs AS j
    CROSS JOIN LATERAL (
        SELECT j.kind = ANY(%(external_kinds)s::text[])
               OR EXISTS (SELECT 1
                          FROM pgq.supervisors AS v
                          WHERE j.kind = ANY(v.external_kinds)) AS unknown
    ) AS x
    JOIN target USING (id)
    LEFT JOIN unnest(%(policy_kinds)s::text[], %(policy_max_attempts)s::integer[])
        AS p(kind, max_attempts) ON p.kind = j.kind
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = CASE
            WHEN d.unknown THEN 'unknown'
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN d.exhausted THEN 'discarded'
            ELSE 'available'
        END,
        run_at = now(),
        last_error = d.error,
        errors = pgq.error_kept(j.errors, j.attempts, d.error),
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN d.unknown THEN NULL
            WHEN d.exhausted OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM decided AS d
    WHERE j.id = d.id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM moved
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM moved
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT m.id, m.queue, m.kind, m.state, m.attempts
FROM moved AS m
CROSS JOIN (SELECT count(*) FROM ended) AS e;

-- name: purge_discarded
-- Deletes up to %(limit)s dead letters and up to %(limit)s cancelled jobs that finished before
-- %(older_than)s; run in a loop. One arm per state, so each reads its own partial index in
-- finish order. %(kind)s and %(queue)s narrow it when given (`dlq purge --kind`); null means any.
WITH dead AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'discarded'
      AND finished_at < %(older_than)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
cancelled AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'cancelled'
      AND finished_at < %(older_than)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgq.jobs
WHERE id IN (SELECT id FROM dead UNION ALL SELECT id FROM cancelled);

-- name: replay
-- Puts dead letters back in their queues with attempts reset. Every filter is optional but the
-- caller must give at least one (or say all): ids, kind, queue, finished before a time.
-- A dead letter whose unique key is held again (by a waiting or running job, or by a newer dead
-- letter replayed in the same call) stays dead: replaying it would duplicate that job. Returns
-- every matching dead letter: replayed true with its queue, or replayed false with its key.
WITH locked AS (
    SELECT id, unique_key, finished_at
    FROM pgq.jobs
    WHERE state = 'discarded'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(finished_before)s::timestamptz IS NULL
           OR finished_at < %(finished_before)s::timestamptz)
    FOR UPDATE
),
matching AS (
    SELECT id, unique_key,
           row_number() OVER (PARTITION BY unique_key ORDER BY finished_at DESC, id DESC) AS nth
    FROM locked
),
replayable AS (
    SELECT m.id
    FROM matching AS m
    WHERE m.unique_key IS NULL
       OR (m.nth = 1
           AND NOT EXISTS (
               SELECT 1
               FROM pgq.jobs AS holder
               WHERE holder.unique_key = m.unique_key
                 AND holder.state IN ('available', 'running', 'scheduled')
           ))
),
replayed AS (
    -- A cancel request made while it ran belongs to that run: kept, it would have the new run
    -- stopped a second after it starts.
    UPDATE pgq.jobs AS j
    SET state = 'available',
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        cancel_requested_at = NULL,
        -- Its batch counted it when it was discarded; replayed, it runs on its own. A workflow
        -- step stays in its workflow (0050): re-opened below, it releases its children again.
        batch_id = CASE WHEN w.job_id IS NOT NULL THEN j.batch_id END
    FROM replayable AS r
    LEFT JOIN pgq.workflow_steps AS w ON w.job_id = r.id
    WHERE j.id = r.id
    RETURNING j.id, j.queue, j.batch_id
),
reopened AS (
    SELECT pgq.workflow_reopen(array_agg(id ORDER BY id))
    FROM replayed
    WHERE batch_id IS NOT NULL
    HAVING count(*) > 0
)
SELECT id, queue, NULL::text AS unique_key, true AS replayed
FROM replayed
CROSS JOIN (SELECT count(*) FROM reopened) AS o
UNION ALL
SELECT m.id, NULL, m.unique_key, false
FROM matching AS m
WHERE m.id NOT IN (SELECT id FROM replayable);

-- name: history_partitions
-- Creates the daily history partitions from today through %(days_ahead)s days later.
SELECT pgq.ensure_history_partitions(now(), %(days_ahead)s);

-- name: drop_history
-- Drops the oldest history partition whose day ended before %(older_than)s (0 or 1 dropped).
SELECT pgq.drop_history_partitions(%(older_than)s);

-- name: purge_history_default
-- Deletes up to %(limit)s old rows that landed in the default history partition.
DELETE FROM pgq.job_history_default
WHERE ctid = ANY(ARRAY(
    SELECT ctid
    FROM pgq.job_history_default
    WHERE finished_at < %(older_than)s
    LIMIT %(limit)s
));

-- name: table_health
-- Is vacuum keeping up with the job table? Dead tuples should stay far below live ones.
SELECT
    s.n_live_tup,
    s.n_dead_tup,
    s.last_autovacuum,
    s.last_vacuum,
    s.autovacuum_count,
    (SELECT extract(epoch FROM now() - min(run_at))
     FROM pgq.jobs
     WHERE state = 'available' AND run_at <= now()) AS oldest_available_age
FROM pg_stat_user_tables AS s
WHERE s.schemaname = 'pgq'
  AND s.relname = 'jobs';

-- name: queue_stats
-- Per queue: jobs due now, scheduled for later, running, dead, cancelled; age of the oldest due
-- job; whether the queue is paused (a paused queue with no jobs is listed too); jobs whose
-- outcome is unknown (last, so readers of the earlier columns are unchanged); then workflow
-- steps waiting for their parents (0050).
SELECT
    coalesce(j.queue, p.queue) AS queue,
    coalesce(j.available, 0),
    coalesce(j.scheduled, 0),
    coalesce(j.running, 0),
    coalesce(j.discarded, 0),
    coalesce(j.cancelled, 0),
    coalesce(j.oldest_ready_age, 0)::float8,
    p.queue IS NOT NULL AS paused,
    coalesce(j.unknown, 0),
    coalesce(j.waiting, 0)
FROM (
    SELECT
        queue,
        count(*) FILTER (WHERE state = 'available' AND run_at <= now()) AS available,
        count(*) FILTER (WHERE state = 'scheduled'
                            OR (state = 'available' AND run_at > now())) AS scheduled,
        count(*) FILTER (WHERE state = 'running') AS running,
        count(*) FILTER (WHERE state = 'discarded') AS discarded,
        count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
        count(*) FILTER (WHERE state = 'unknown') AS unknown,
        count(*) FILTER (WHERE state = 'waiting') AS waiting,
        extract(epoch FROM now() - min(run_at)
            FILTER (WHERE state = 'available' AND run_at <= now())) AS oldest_ready_age
    FROM pgq.jobs
    GROUP BY queue
) AS j
FULL JOIN pgq.queue_pauses AS p ON p.queue = j.queue
ORDER BY 1;

-- name: stage_due
-- The stager: moves up to %(limit)s scheduled jobs whose run_at has come to available, oldest
-- first, and wakes every host's idle workers of each queue it staged (one NOTIFY per queue).
-- SKIP LOCKED lets several supervisors stage at once without waiting on each other; the state
-- condition on the UPDATE keeps it a no-op for a row another stager moved first.
WITH due AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'scheduled'
      AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
staged AS (
    UPDATE pgq.jobs AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id
      AND j.state = 'scheduled'
    RETURNING j.queue
),
queues AS (
    SELECT queue, count(*) AS jobs
    FROM staged
    GROUP BY queue
)
SELECT queue, jobs, pg_notify('pgq_jobs', queue)
FROM queues;

-- name: next_scheduled
-- Seconds from now until the earliest scheduled job is due (negative when overdue), null when
-- none waits: the first entry of jobs_scheduled, measured on the database's clock.
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM pgq.jobs
WHERE state = 'scheduled';

-- name: claim_schedule_tick
-- Records that this supervisor enqueues schedule %(name)s's tick %(tick)s. Returns a row only
-- to the one caller that moved the schedule's last tick forward: a second supervisor (or a
-- restarted one) waits on the row lock, then finds the tick taken and gets nothing.
INSERT INTO pgq.schedules AS s (name, last_tick)
VALUES (%(name)s, %(tick)s)
ON CONFLICT (name) DO UPDATE
SET last_tick = EXCLUDED.last_tick,
    updated_at = now()
WHERE s.last_tick < EXCLUDED.last_tick
RETURNING name;

-- name: database_clock
-- The database's clock, the one every host shares: schedule ticks and purge cutoffs are read
-- from it, not from the host's (a host whose clock runs ahead would take ticks early).
SELECT clock_timestamp();

-- name: schedule_lock_timeout
-- The scheduler's transaction waits at most this long for a schedule's row: the holder is
-- another supervisor enqueueing the same tick, and the master's loop must not hang on it.
-- set_config(..., true) is SET LOCAL: it ends with the transaction.
SELECT set_config('lock_timeout', '200ms', true);

-- name: schedule_last_tick
-- The last tick schedule %(name)s enqueued (or recorded as passed), if any.
SELECT last_tick
FROM pgq.schedules
WHERE name = %(name)s;

-- name: record_schedule_job
-- The job a schedule's last tick enqueued, for status.
UPDATE pgq.schedules
SET last_job_id = %(job_id)s
WHERE name = %(name)s;

-- name: list_schedules
-- Every schedule's last tick and job, for status.
SELECT name, last_tick, last_job_id
FROM pgq.schedules
ORDER BY name;

-- name: claim_maintenance_run
-- Records that %(run_by)s runs the singleton task %(task)s now, unless some supervisor ran it
-- less than %(interval)s seconds ago; returns a row only when this caller should run it, and
-- logs that run in pgq.maintenance_runs. The conditional upsert is atomic on its own (a second
-- caller waits for the first's row and then fails the WHERE); the task's advisory lock around
-- it keeps a run that outlasts its interval from overlapping the next.
WITH claimed AS (
    INSERT INTO pgq.maintenance AS m (task, last_run_at, run_by)
    VALUES (%(task)s, now(), %(run_by)s)
    ON CONFLICT (task) DO UPDATE
    SET last_run_at = now(),
        run_by = EXCLUDED.run_by
    WHERE m.last_run_at <= now() - make_interval(secs => %(interval)s::float8)
    RETURNING task, run_by, last_run_at
)
INSERT INTO pgq.maintenance_runs (task, run_by, started_at)
SELECT task, run_by, last_run_at
FROM claimed
RETURNING started_at;

-- name: maintenance_run_current
-- Whether the run of %(task)s that %(run_by)s started at %(started_at)s is still the task's
-- latest: a run that spans several turns of its master's loop goes on only while no other
-- supervisor has started the next interval's run.
SELECT 1
FROM pgq.maintenance
WHERE task = %(task)s
  AND run_by = %(run_by)s
  AND last_run_at = %(started_at)s;

-- name: purge_maintenance_runs
-- Forgets the log of maintenance runs older than %(older_than)s.
DELETE FROM pgq.maintenance_runs
WHERE started_at < %(older_than)s;

-- name: heartbeat_supervisor
-- Registers a supervisor, or refreshes its heartbeat, with the kinds its YAML declares
-- `effects: external` (a reload may change them), which every host's rescuer honours.
INSERT INTO pgq.supervisors (id, host, pid, config, external_kinds)
VALUES (%(id)s, %(host)s, %(pid)s, %(config)s, %(external_kinds)s::text[])
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(),
    external_kinds = EXCLUDED.external_kinds;

-- name: clear_workers
-- Forgets a supervisor's children before their current list is written again.
DELETE FROM pgq.workers
WHERE supervisor_id = %(id)s;

-- name: record_workers
-- Writes a supervisor's children as they are now.
INSERT INTO pgq.workers (supervisor_id, worker_id, pool, slot, pid, state, job_id, kind,
                         job_started, spawned_at, rss_bytes)
SELECT %(id)s, w.worker_id, w.pool, w.slot, w.pid, w.state, w.job_id, w.kind,
       w.job_started, w.spawned_at, w.rss_bytes
FROM unnest(
    %(worker_ids)s::text[],
    %(pools)s::text[],
    %(slots)s::integer[],
    %(pids)s::integer[],
    %(states)s::text[],
    %(job_ids)s::bigint[],
    %(kinds)s::text[],
    %(job_starts)s::timestamptz[],
    %(spawned)s::timestamptz[],
    %(rss)s::bigint[]
) AS w(worker_id, pool, slot, pid, state, job_id, kind, job_started, spawned_at, rss_bytes);

-- name: prune_supervisors
-- Forgets supervisors (and, by cascade, their children) that stopped heartbeating, and their
-- wake-up flags.
WITH gone AS (
    DELETE FROM pgq.supervisors
    WHERE heartbeat_at < now() - make_interval(secs => %(stale_after)s::float8)
    RETURNING id, host, pid
),
flags AS (
    DELETE FROM pgq.queue_wakeups AS w
    USING gone
    WHERE w.supervisor_id = gone.id
)
SELECT id, host, pid FROM gone;

-- name: unregister_supervisor
-- A supervisor that stops cleanly removes itself, and its wake-up flags.
WITH flags AS (
    DELETE FROM pgq.queue_wakeups
    WHERE supervisor_id = %(id)s
)
DELETE FROM pgq.supervisors
WHERE id = %(id)s;

-- name: want_wakeups
-- A master raises the wake-up flags of the queues in %(queues)s: it has a child asleep for
-- them. Only a lowered flag is written (a raised one is not even locked, so an enqueue taking
-- it never skips it because of us); a missing one is added. Returns the queues whose flag went
-- up: the master then wakes a child of each once more, so that a job enqueued while the flag
-- was down, and not notified, is claimed now rather than at the next poll. The flags are hints
-- (a lost one is written again within a second), so their commit does not wait for the WAL
-- flush: the master's loop waits on this statement.
WITH quick AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
raised AS (
    UPDATE pgq.queue_wakeups
    SET wanted = true
    WHERE supervisor_id = %(supervisor_id)s
      AND queue = ANY(%(queues)s::text[])
      AND NOT wanted
    RETURNING queue
),
added AS (
    INSERT INTO pgq.queue_wakeups (queue, supervisor_id)
    SELECT q, %(supervisor_id)s
    FROM unnest(%(queues)s::text[]) AS q
    ON CONFLICT (queue, supervisor_id) DO NOTHING
    RETURNING queue
)
SELECT f.queue
FROM quick
LEFT JOIN (SELECT queue FROM raised UNION ALL SELECT queue FROM added) AS f ON true;

-- name: forget_wakeups
-- A master's flags for queues it no longer serves (after a reload), or all of them (null).
DELETE FROM pgq.queue_wakeups
WHERE supervisor_id = %(supervisor_id)s
  AND (%(keep)s::text[] IS NULL OR NOT queue = ANY(%(keep)s::text[]));

-- name: list_supervisors
-- Live supervisors, for status.
SELECT id, host, pid, config, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
FROM pgq.supervisors
ORDER BY host, started_at;

-- name: list_workers
-- Children of live supervisors, for status. Rows are a snapshot taken at the supervisor's last
-- heartbeat, so a job's age is measured to that moment: a fast job seen in a 5-second-old
-- snapshot ran for milliseconds, not for 5 seconds.
SELECT w.supervisor_id, w.worker_id, w.pool, w.slot, w.pid, w.state, w.job_id, w.kind,
       w.job_started,
       greatest(0, extract(epoch FROM s.heartbeat_at - w.job_started))::float8 AS job_age,
       w.spawned_at, w.rss_bytes
FROM pgq.workers AS w
JOIN pgq.supervisors AS s ON s.id = w.supervisor_id
ORDER BY w.supervisor_id, w.pool, w.slot;

-- name: history_throughput
-- Jobs finished per queue and outcome over the last %(seconds)s seconds (history kept only).
SELECT queue, outcome, count(*) AS jobs
FROM pgq.job_history
WHERE finished_at > now() - make_interval(secs => %(seconds)s::float8)
GROUP BY queue, outcome
ORDER BY queue, outcome;

-- name: clock
-- The database's time: operator commands measure ages and cutoffs on the server's clock, so a
-- skewed clock on the operator's machine cannot shift what `--older-than 1d` selects.
SELECT now();

-- name: list_discarded
-- Dead letters, newest first, up to %(limit)s; every filter is optional (null means any).
-- Reads the jobs_discarded index backwards.
SELECT id, kind, queue, attempts, max_attempts, finished_at, unique_key, last_error
FROM pgq.jobs
WHERE state = 'discarded'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR finished_at > %(finished_after)s::timestamptz)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: count_discarded
-- How many dead letters match the same filters as list_discarded (when a listing is cut short).
SELECT count(*)
FROM pgq.jobs
WHERE state = 'discarded'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR finished_at > %(finished_after)s::timestamptz);

-- name: job_by_id
-- Everything about one job, whatever its state (`dlq show`).
SELECT id, queue, kind, state, args, priority, attempts, max_attempts, unique_key, last_error,
       created_at, run_at, started_at, finished_at, locked_by
FROM pgq.jobs
WHERE id = %(id)s;

-- name: job_inserted_here
-- Whether job %(id)s was inserted by the current transaction. An enqueue whose unique key is
-- already held returns the holder's id; this tells a new job from the holder, exactly.
SELECT xmin = pg_current_xact_id()::xid
FROM pgq.jobs
WHERE id = %(id)s;

-- name: try_advisory_lock
-- Takes a session advisory lock if it is free; true when this session now holds it.
SELECT pg_try_advisory_lock(%(key)s);

-- name: advisory_unlock
-- Releases a session advisory lock this session holds.
SELECT pg_advisory_unlock(%(key)s);

-- name: try_advisory_xact_lock
-- Takes an advisory lock until the end of the current transaction if it is free; true when
-- taken. Holds no session state, so it is safe through a transaction-mode pooler.
SELECT pg_try_advisory_xact_lock(%(key)s);

-- name: vacuum_due
-- How many dead rows pgq.jobs holds (every consumed job leaves one, and its entry at the head
-- of the claim index, which each claim steps over until VACUUM removes it), and whether this
-- role may vacuum the table: its owner or a superuser, or on PostgreSQL 17 and later a role
-- granted MAINTAIN (%(maintain)s says whether the server knows that privilege).
SELECT coalesce(s.n_dead_tup, 0) AS dead_rows,
       pg_has_role(c.relowner, 'USAGE')
           OR CASE WHEN %(maintain)s THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
           AS allowed
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = 'pgq.jobs'::regclass;

-- name: vacuum_jobs
-- Sent without waiting for it (the master's loop must not block), on a connection of its own.
-- SKIP_LOCKED: when autovacuum or another host is at it already, this one has nothing to add.
VACUUM (SKIP_LOCKED) pgq.jobs;

-- name: session_timeouts
-- A session whose statements must not run long (the doctor's probes).
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false);

-- name: loop_session_timeouts
-- The master's sessions: no statement of its loop may hold it for long, and a transaction the
-- loop gave up on (no answer in time: the network went) is ended by the server instead of
-- holding its locks until the dead connection is noticed (see services/database.py).
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s, false);

-- name: cancel_jobs
-- Cancels the jobs %(ids)s. A waiting job (available, or scheduled for later) becomes
-- 'cancelled' at once and keeps finished_at, like a dead letter. A running job cannot be
-- changed under its owner's fence: it gets cancel_requested_at, and the master running it stops
-- it (the write that ends its claim then makes it 'cancelled'). Returns each id found with what
-- happened: 'cancelled now', 'cancel requested' (running: stopping) or its state when it had
-- already finished ('discarded', 'cancelled'). FOR UPDATE waits for a claim in flight, so a job claimed
-- at this very moment is seen running, never cancelled under its new owner.
WITH target AS (
    SELECT id, state
    FROM pgq.jobs
    WHERE id = ANY(%(ids)s::bigint[])
    FOR UPDATE
),
waiting AS (
    UPDATE pgq.jobs AS j
    SET state = 'cancelled',
        finished_at = now(),
        cancel_requested_at = now()
    FROM target AS t
    WHERE j.id = t.id
      -- 'waiting': a workflow step whose parents have not all ended (0050); batch_ended below
      -- then cancels its 'cancel' descendants (pgq.workflow_ended).
      AND t.state IN ('available', 'scheduled', 'waiting')
    RETURNING j.id, j.queue, j.kind, j.attempts, j.created_at, j.started_at, j.finished_at,
              j.errors, j.batch_id
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg('cancelled'::text))
    FROM waiting
    WHERE batch_id IS NOT NULL
    HAVING count(*) > 0
),
requested AS (
    UPDATE pgq.jobs AS j
    SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM target AS t
    WHERE j.id = t.id
      AND t.state = 'running'
    RETURNING j.id
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, 'cancelled', attempts, created_at, started_at, finished_at, errors
    FROM waiting
    WHERE %(history)s
)
SELECT t.id,
       CASE
           WHEN w.id IS NOT NULL THEN 'cancelled now'
           WHEN r.id IS NOT NULL THEN 'cancel requested'
           ELSE t.state
       END AS result
FROM target AS t
LEFT JOIN waiting AS w ON w.id = t.id
LEFT JOIN requested AS r ON r.id = t.id
CROSS JOIN (SELECT count(*) FROM ended) AS e
ORDER BY t.id;

-- name: cancel_requests
-- The jobs held by these workers that someone asked to cancel (read every second by each
-- master from the small jobs_cancel_requests index).
SELECT id, locked_by, kind, queue
FROM pgq.jobs
WHERE state = 'running'
  AND cancel_requested_at IS NOT NULL
  AND locked_by = ANY(%(workers)s::text[]);

-- name: cancel_requested
-- Whether a claimed job, still ours, has a cancel request (JobContext.cancelled()).
SELECT cancel_requested_at IS NOT NULL
FROM pgq.jobs
WHERE id = %(id)s
  AND lease_id = %(lease_id)s;

-- name: unstarted_stops
-- Which claimed jobs, still ours and not started yet, must not start: those someone asked to
-- cancel, and those of a paused queue (a single-threaded child asks before the next job of a
-- batch that has waited; the ids and lease ids are the batch's, pairwise).
SELECT j.id,
       j.cancel_requested_at IS NOT NULL AS cancelled,
       EXISTS (SELECT 1 FROM pgq.queue_pauses AS p WHERE p.queue = j.queue) AS paused
FROM pgq.jobs AS j
JOIN unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS c (id, lease_id)
  ON c.id = j.id
 AND c.lease_id = j.lease_id
WHERE j.state = 'running'
  AND (j.cancel_requested_at IS NOT NULL
       OR EXISTS (SELECT 1 FROM pgq.queue_pauses AS p WHERE p.queue = j.queue));

-- name: pause_queue
-- Pauses a queue; returns a row only when it was not paused already.
INSERT INTO pgq.queue_pauses (queue)
VALUES (%(queue)s)
ON CONFLICT (queue) DO NOTHING
RETURNING paused_at;

-- name: resume_queue
-- Resumes a paused queue; returns a row only when it was paused. Wakes its idle workers at
-- commit, since due jobs may have piled up while it was paused.
WITH resumed AS (
    DELETE FROM pgq.queue_pauses
    WHERE queue = %(queue)s
    RETURNING queue
)
SELECT queue, pg_notify('pgq_jobs', queue) IS NULL
FROM resumed;

-- name: paused_queues
-- Every paused queue, with when and by whom.
SELECT queue, paused_at, paused_by
FROM pgq.queue_pauses
ORDER BY queue;

-- name: retry_now
-- Makes a waiting job due now (a job waiting for its retry's backoff, or scheduled for later);
-- it keeps its attempts. Returns the job's queue and state before, or nothing when the job is
-- not waiting (running, finished or gone). Wakes the queue's idle workers at commit.
WITH target AS (
    SELECT id, state, run_at
    FROM pgq.jobs
    WHERE id = %(id)s
      AND state IN ('available', 'scheduled')
    FOR UPDATE
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = 'available',
        run_at = least(j.run_at, now())
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.queue
)
SELECT m.queue, t.state, t.run_at, pg_notify('pgq_jobs', m.queue) IS NULL
FROM moved AS m
JOIN target AS t ON t.id = m.id;

-- name: list_jobs
-- Jobs in any state, newest first, up to %(limit)s; every filter is optional (null means any).
SELECT id, queue, kind, state, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, locked_by, cancel_requested_at, last_error
FROM pgq.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_detail
-- Everything about one job, with the supervisor, pool, slot and pid of the worker running it
-- (from the registry's last heartbeat) when it runs, and every error kept.
SELECT j.id, j.queue, j.kind, j.state, j.args, j.priority, j.attempts, j.max_attempts,
       j.unique_key, j.last_error, j.created_at, j.run_at, j.started_at, j.finished_at,
       j.locked_by, j.lease_until, j.cancel_requested_at,
       s.host, w.pool, w.slot, w.pid, j.errors
FROM pgq.jobs AS j
LEFT JOIN pgq.workers AS w ON w.worker_id = j.locked_by
LEFT JOIN pgq.supervisors AS s ON s.id = w.supervisor_id
WHERE j.id = %(id)s;

-- name: due_queues
-- The queues that hold jobs due now and are not paused (supervisor.testing.drain).
SELECT DISTINCT queue
FROM pgq.jobs
WHERE state = 'available'
  AND run_at <= now()
  AND queue NOT IN (SELECT queue FROM pgq.queue_pauses)
ORDER BY queue;
