-- Enqueue: the statements that insert jobs and wake their readers (supervisor.queue.enqueue).
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: enqueue
-- Inserts one job through the caller's connection. A unique key that is already held by a
-- waiting (available, scheduled, or a follower of an order key: 0070), running or unknown job
-- inserts nothing and returns no row
-- (`id > 0`, always true, makes both unique indexes the arbiters: migration 0041 says why). A job
-- due later is written 'scheduled', outside the claim index, and wakes the masters' stagers
-- (pgq_scheduled) when it is due before their next look (pgq.wakes_stagers, 0036: within 10
-- s; they look once a second anyway); a job due now wakes its queue's workers (pgq_jobs), but
-- only when a master has raised the queue's flag (it has a child asleep for it): a look at the
-- queue's newest row in pgq.wakeup_flags finds whether it is up (0071: it reads that row first,
-- whatever a held horizon keeps), and only then pgq.take_wakeups takes it, unless another
-- transaction holds it, and notifies if it took it, so concurrent producers do not each take
-- NOTIFY's database-wide commit lock (migration 0021).
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
          AND id > 0
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
        WHEN (SELECT f.up FROM pgq.wakeup_flags AS f
              WHERE f.queue = inserted.queue ORDER BY f.seq DESC LIMIT 1)
            THEN pgq.take_wakeups(queue)
    END
FROM inserted;

-- name: job_by_unique_key
-- The job that holds a unique key, when an enqueue with that key inserted nothing: waiting
-- (available, scheduled, or behind its order key: 'waiting', 0070), running or unknown
-- (jobs_unique_key_holder, 0070). Every holder look-up names 'unknown' and 'waiting': the
-- insert's arbiters count them, so a look-up without them would find no holder and the enqueue
-- would try again forever.
SELECT id
FROM pgq.jobs
WHERE unique_key = %(unique_key)s
  AND state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
  AND id > 0;

-- name: jobs_by_unique_keys
-- The jobs that hold any of these unique keys (bulk enqueue's duplicates).
SELECT unique_key, id
FROM pgq.jobs
WHERE unique_key = ANY(%(unique_keys)s::text[])
  AND state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
  AND id > 0;

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
          AND id > 0
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
       AND (SELECT f.up FROM pgq.wakeup_flags AS f
            WHERE f.queue = d.q ORDER BY f.seq DESC LIMIT 1))
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

-- name: job_inserted_here
-- Whether job %(id)s was inserted by the current transaction. An enqueue whose unique key is
-- already held returns the holder's id; this tells a new job from the holder, exactly.
SELECT xmin = pg_current_xact_id()::xid
FROM pgq.jobs
WHERE id = %(id)s;

-- name: enqueue_debounced
-- A debounced enqueue (0064): while a job enqueued with this debounce key has not started
-- (jobs_debounce_key, 0065: available or scheduled, never claimed), its arguments become these
-- and its run_at now + %(delay)s, and its id comes back; otherwise a new job is inserted, due
-- then. One statement, so two producers debouncing the same key at once serialise on the
-- waiting row's lock: the second updates it after the first (the later arguments win), or, if
-- the row started meanwhile, inserts a job of its own. The key travels in unique_key's slot of
-- the caller's row but is written to debounce_key (unique_key stays NULL: a unique key is held
-- while its job runs, a debounce key is not). Wake-ups as in enqueue.
WITH upserted AS (
    INSERT INTO pgq.jobs AS j (queue, kind, args, priority, run_at, state, max_attempts,
                               debounce_key, traceparent, tenant)
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
    ON CONFLICT (debounce_key)
        WHERE debounce_key IS NOT NULL AND state IN ('available', 'scheduled')
          AND started_at IS NULL
    DO UPDATE SET args = EXCLUDED.args, run_at = EXCLUDED.run_at, state = EXCLUDED.state
    RETURNING j.id, j.queue, j.state, j.run_at
)
SELECT
    id,
    CASE
        WHEN NOT %(notify)s THEN NULL
        WHEN state = 'scheduled'
            THEN CASE WHEN pgq.wakes_stagers(run_at) THEN pg_notify('pgq_scheduled', '') IS NULL
                 END
        WHEN (SELECT f.up FROM pgq.wakeup_flags AS f
              WHERE f.queue = upserted.queue ORDER BY f.seq DESC LIMIT 1)
            THEN pgq.take_wakeups(queue)
    END
FROM upserted;

-- name: enqueue_ordered
-- A job with an order key (0066): pgq.enqueue itself, which takes the key's row in
-- pgq.order_keys before it inserts (so a key's producers and its endings serialise there), writes
-- the job as its key's head (available or scheduled, as usual) or as a follower ('waiting'), and
-- gives the count back when it inserts nothing (a held unique key, a debounce that replaced the
-- key's head). Due now or at %(run_at)s or in %(delay)s seconds; with %(debounced)s, %(delay)s is
-- the debounce. Wake-ups as in enqueue (the function raises them whatever notify says).
SELECT pgq.enqueue(
    kind => %(kind)s::text,
    args => %(args)s::jsonb,
    queue => %(queue)s::text,
    priority => %(priority)s::integer,
    run_at => CASE WHEN NOT %(debounced)s::boolean
                   THEN coalesce(%(run_at)s::timestamptz,
                                 now() + make_interval(secs => %(delay)s::float8)) END,
    max_attempts => %(max_attempts)s::integer,
    unique_key => %(unique_key)s::text,
    tenant => %(tenant)s::text,
    traceparent => %(traceparent)s::text,
    debounce => CASE WHEN %(debounced)s::boolean
                     THEN make_interval(secs => %(delay)s::float8) END,
    order_key => %(order_key)s::text
);

-- name: order_keys_join
-- A bulk enqueue's ordered jobs take their keys (0066): per (queue, key), %(counts)s more
-- unfinished jobs, the rows taken in (queue, key) order (the order of every caller's, so two
-- bulk enqueues do not deadlock on them) before the jobs are written. Returns each key's count
-- after: the count before (after - count) says how many of the key's jobs go ahead of these.
INSERT INTO pgq.order_keys AS o (queue, key, unfinished, head_id)
SELECT t.queue, t.key, t.n, 0
FROM unnest(%(queues)s::text[], %(keys)s::text[], %(counts)s::integer[]) AS t(queue, key, n)
ORDER BY t.queue COLLATE "C", t.key COLLATE "C"
ON CONFLICT (queue, key) DO UPDATE SET unfinished = o.unfinished + EXCLUDED.unfinished
RETURNING o.queue, o.key, o.unfinished;

-- name: enqueue_ordered_rows
-- The ordered jobs of a bulk enqueue, after order_keys_join: each a head (written as usual,
-- available or scheduled) or, with %(follows)s, a follower ('waiting'). In input order, so the
-- ids of a key's jobs follow it. Returns each id in input order with its key, and whether it is
-- due later before the stagers' next look; the due heads' queues are woken as in enqueue_many.
WITH inserted AS (
    INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, max_attempts, traceparent,
                          tenant, order_key)
    SELECT
        t.queue,
        t.kind,
        t.args,
        t.priority,
        r.run_at,
        CASE WHEN t.follows THEN 'waiting'
             WHEN r.run_at > now() THEN 'scheduled' ELSE 'available' END,
        t.max_attempts,
        t.traceparent,
        t.tenant,
        t.order_key
    FROM ROWS FROM (
        unnest(%(queues)s::text[]),
        unnest(%(kinds)s::text[]),
        jsonb_array_elements(%(args)s::jsonb),
        unnest(%(priorities)s::smallint[]),
        unnest(%(run_ats)s::timestamptz[]),
        unnest(%(delays)s::float8[]),
        unnest(%(max_attempts)s::integer[]),
        unnest(%(traceparents)s::text[]),
        unnest(%(tenants)s::text[]),
        unnest(%(order_keys)s::text[]),
        unnest(%(follows)s::boolean[])
    ) WITH ORDINALITY AS t(queue, kind, args, priority, run_at, delay, max_attempts,
                           traceparent, tenant, order_key, follows, ord)
    CROSS JOIN LATERAL (
        SELECT coalesce(t.run_at, now() + make_interval(secs => t.delay)) AS run_at
    ) AS r
    ORDER BY t.ord
    RETURNING id, queue, order_key, state, run_at
)
SELECT
    id,
    state = 'scheduled' AND pgq.wakes_stagers(run_at) AS wakes_stagers,
    (SELECT count(*) FILTER (WHERE pgq.take_wakeups(q))
     FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS d(q)
     WHERE %(notify)s
       AND (SELECT f.up FROM pgq.wakeup_flags AS f
            WHERE f.queue = d.q ORDER BY f.seq DESC LIMIT 1))
FROM inserted;

-- name: order_heads
-- The keys a bulk enqueue opened (none of their jobs was unfinished before it) get their head:
-- the first of its jobs there, the one not written 'waiting'.
UPDATE pgq.order_keys AS o
SET head_id = h.id
FROM unnest(%(queues)s::text[], %(keys)s::text[], %(ids)s::bigint[]) AS h(queue, key, id)
WHERE o.queue = h.queue
  AND o.key = h.key;
