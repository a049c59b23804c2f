-- Named queries of workflows (issue 32; the tables and functions are migration 0050's). Loaded
-- with sql/queries.sql into the same dict (supervisor/queue/queries.py); the same rules: a
-- "-- name:" line, the description, the statement; every value a parameter.

-- name: enqueue_workflow
-- Writes a whole workflow in one statement from parallel arrays (one entry per step, in `add`
-- order) and the edges as positions (%(edge_parents)s[i] -> %(edge_children)s[i], 1-based):
-- the workflow's batch row and counters, every job, every step row, every edge and every gate.
-- The ids are taken from the jobs' sequence first, so the edges can name them in the same
-- statement. A step with parents is written 'waiting' (run_at is then unused: a delay counts
-- from its release); a step without any is due as any job is, or, with %(follows)s, waits
-- behind its order key's head (the caller took the keys first, order_keys_join). A step's order
-- key is kept on its step row; a step without parents has it on its job too (it joined its key
-- now), one with parents gets it there when it is released and joins (0068,
-- pgq.workflow_ended). The queues that received due
-- steps are woken as enqueue_many wakes them. Returns the ids in `add` order, then (on every
-- row) the workflow's id and whether a step due later wakes the stagers.
WITH steps AS (
    -- The ids in `add` order (the scan yields the rows in order, and nextval runs per row).
    SELECT t.*, nextval('pgq.jobs_id_seq'::regclass) AS id
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
        unnest(%(policies)s::text[]),
        unnest(%(parents)s::integer[]),
        unnest(%(shards)s::integer[]),
        unnest(%(order_keys)s::text[]),
        unnest(%(follows)s::boolean[])
    ) WITH ORDINALITY AS t(queue, kind, args, priority, run_at, delay, max_attempts,
                           traceparent, tenant, policy, parents, shards, order_key, follows, ord)
),
-- Positions become ids by subscript, not by joins: a join of these unnests is estimated at
-- billions of rows, and the plan's cost then made the server JIT-compile it (a second of a
-- 10,000-step enqueue).
positions AS (
    SELECT array_agg(id ORDER BY ord) AS ids
    FROM steps
),
edges AS (
    SELECT x.ids[e.p] AS parent_id, x.ids[e.c] AS child_id,
           mod(x.ids[e.p], (%(shards)s::integer[])[e.c])::integer AS shard
    FROM unnest(%(edge_parents)s::integer[], %(edge_children)s::integer[]) AS e(p, c)
    CROSS JOIN positions AS x
),
gate_counts AS (
    SELECT child_id, shard, count(*)::integer AS remaining
    FROM edges
    GROUP BY 1, 2
),
gates_per_step AS (
    SELECT child_id, count(*)::integer AS n
    FROM gate_counts
    GROUP BY 1
),
batch AS (
    INSERT INTO pgq.batches (total, shards, shards_left, workflow, workflow_name)
    SELECT cardinality(%(kinds)s::text[]),
           %(batch_shards)s::integer,
           (SELECT count(DISTINCT mod(id, %(batch_shards)s::integer)) FROM steps),
           true,
           %(name)s::text
    RETURNING id, shards
),
counters AS (
    INSERT INTO pgq.batch_shards (batch_id, shard, remaining)
    SELECT batch.id, mod(s.id, batch.shards)::integer, count(*)
    FROM steps AS s
    CROSS JOIN batch
    GROUP BY 1, 2
),
jobs AS (
    INSERT INTO pgq.jobs (id, queue, kind, args, priority, run_at, state, max_attempts,
                          traceparent, tenant, batch_id, order_key)
    OVERRIDING SYSTEM VALUE
    SELECT s.id, s.queue, s.kind, s.args, s.priority, r.run_at,
           CASE
               WHEN s.parents > 0 OR s.follows THEN 'waiting'
               WHEN r.run_at > now() THEN 'scheduled'
               ELSE 'available'
           END,
           s.max_attempts, s.traceparent, s.tenant, batch.id,
           CASE WHEN s.parents = 0 THEN s.order_key END
    FROM steps AS s
    CROSS JOIN batch
    CROSS JOIN LATERAL (
        SELECT CASE
                   WHEN s.parents > 0 THEN now()
                   ELSE coalesce(s.run_at, now() + make_interval(secs => s.delay))
               END AS run_at
    ) AS r
    ORDER BY s.ord
    RETURNING id, queue, state, run_at
),
step_rows AS (
    INSERT INTO pgq.workflow_steps (job_id, workflow_id, position, kind, queue,
                                    on_parent_failure, parents, shards, shards_left, delay,
                                    released_at, order_key)
    SELECT s.id, batch.id, s.ord, s.kind, s.queue, s.policy, s.parents, s.shards,
           coalesce(g.n, 0), CASE WHEN s.parents > 0 THEN s.delay ELSE 0 END,
           CASE WHEN s.parents = 0 THEN now() END, s.order_key
    FROM steps AS s
    CROSS JOIN batch
    LEFT JOIN gates_per_step AS g ON g.child_id = s.id
),
edge_rows AS (
    INSERT INTO pgq.workflow_edges (parent_id, child_id)
    SELECT parent_id, child_id
    FROM edges
),
gate_rows AS (
    INSERT INTO pgq.workflow_gates (child_id, shard, remaining)
    SELECT child_id, shard, remaining
    FROM gate_counts
),
woken AS (
    SELECT count(*) FILTER (WHERE pgq.take_wakeups(q)) AS n
    FROM (SELECT DISTINCT queue FROM jobs WHERE state = 'available') AS d(q)
    WHERE %(notify)s
)
SELECT s.id,
       (SELECT id FROM batch) AS workflow_id,
       (SELECT coalesce(bool_or(state = 'scheduled' AND pgq.wakes_stagers(run_at)), false)
        FROM jobs) AS wakes_stagers,
       (SELECT n FROM woken) AS woken
FROM steps AS s
ORDER BY s.ord;

-- name: workflow_status
-- A workflow's progress: its batch's counters (no step is read) and when it ended.
SELECT b.id, b.workflow_name, b.total,
       coalesce(sum(s.remaining), 0)::integer AS remaining,
       coalesce(sum(s.completed), 0)::integer AS completed,
       coalesce(sum(s.discarded), 0)::integer AS discarded,
       coalesce(sum(s.cancelled), 0)::integer AS cancelled,
       b.created_at, b.finished_at, b.cancelled_at
FROM pgq.batches AS b
LEFT JOIN pgq.batch_shards AS s ON s.batch_id = b.id
WHERE b.id = %(id)s
  AND b.workflow
GROUP BY b.id;

-- name: workflow_steps
-- Every step of workflow %(id)s in `add` order: its job's state (a completed job's row is gone:
-- its step says 'completed'), its policy, its parents' ids, the timings (released, started,
-- ended) and the size of its result in bytes (null: none kept).
SELECT s.job_id, s.position, s.kind, s.queue,
       coalesce(j.state, s.outcome, 'completed') AS state,
       s.on_parent_failure, s.cause,
       ARRAY(SELECT e.parent_id FROM pgq.workflow_edges AS e
             WHERE e.child_id = s.job_id ORDER BY e.parent_id) AS parents,
       s.released_at,
       coalesce(j.started_at, h.started_at) AS started_at,
       s.ended_at,
       coalesce(j.attempts, h.attempts) AS attempts,
       octet_length(r.result::text) AS result_bytes
FROM pgq.workflow_steps AS s
LEFT JOIN pgq.jobs AS j ON j.id = s.job_id
LEFT JOIN pgq.job_results AS r ON r.id = s.job_id
-- A completed step's row is gone: its last history row (when history is kept) has its start.
LEFT JOIN LATERAL (
    SELECT hh.started_at, hh.attempts
    FROM pgq.job_history AS hh
    WHERE hh.id = s.job_id
      AND j.id IS NULL
    ORDER BY hh.finished_at DESC
    LIMIT 1
) AS h ON true
WHERE s.workflow_id = %(id)s
ORDER BY s.position;

-- name: recent_workflows
-- The newest workflows with their progress, for the dashboard and `workflows list`.
SELECT b.id, b.workflow_name, b.total,
       coalesce(sum(s.remaining), 0)::integer AS remaining,
       coalesce(sum(s.completed), 0)::integer AS completed,
       coalesce(sum(s.discarded), 0)::integer AS discarded,
       coalesce(sum(s.cancelled), 0)::integer AS cancelled,
       b.created_at, b.finished_at, b.cancelled_at
FROM (SELECT * FROM pgq.batches WHERE workflow ORDER BY id DESC LIMIT %(limit)s) AS b
LEFT JOIN pgq.batch_shards AS s ON s.batch_id = b.id
GROUP BY b.id, b.workflow_name, b.total, b.created_at, b.finished_at, b.cancelled_at
ORDER BY b.id DESC;

-- name: cancel_workflow
-- Cancels every step of workflow %(id)s not yet started (pgq.workflow_cancel); null when there
-- is no such workflow.
SELECT pgq.workflow_cancel(%(id)s::bigint);

-- name: job_workflow
-- The workflow job %(id)s is a step of, with its name, position and parents' ids (no row for a
-- job outside workflows), for `jobs show`.
SELECT s.workflow_id, b.workflow_name, s.position, s.on_parent_failure,
       ARRAY(SELECT e.parent_id FROM pgq.workflow_edges AS e
             WHERE e.child_id = s.job_id ORDER BY e.parent_id) AS parents
FROM pgq.workflow_steps AS s
JOIN pgq.batches AS b ON b.id = s.workflow_id
WHERE s.job_id = %(id)s;

-- name: count_waiting
-- Steps waiting for their parents, per queue (outside the claim index and not due), for
-- `status` and the metrics.
SELECT queue, count(*)
FROM pgq.jobs
WHERE state = 'waiting'
GROUP BY queue
ORDER BY queue;
