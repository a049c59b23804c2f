-- Workflows (issue 32): a graph of jobs enqueued in one transaction, each step waiting in state
-- 'waiting' (outside the claim index: jobs_claim covers only 'available') until every parent
-- has ended, then released by the statement, and so the transaction, that records its last
-- parent's ending.
--
-- A workflow is a batch (0018) of all its steps, plus edges. So every statement that ends jobs
-- (the claim's completions, settle, requeue, rescue, cancel, resolve) already reports its steps
-- through pgq.batch_ended, with no change of its own: batch_ended now also hands the steps of
-- workflows to pgq.workflow_ended, which counts down their children and releases the ready
-- ones. The batch's counters give the workflow's progress and its end (finished_at).
--
-- Counting without one hot row (a fan-in of 1,000 parents must not serialise 1,000
-- completions on one row): a step's parents are split into gates by id (parent id % shards),
-- each a row of pgq.workflow_gates holding how many of its parents have not ended. An ending
-- decrements its children's gates (locked in (child, shard) order, one order for every caller);
-- only the decrement that empties a gate touches the child's step row (shards_left), and the
-- one that empties the last gate releases the child. Exactly once: each decrement is
-- serialised by its row's lock, so one statement sees each gate reach zero, and one sees the
-- last; the release itself is fenced on state = 'waiting'. A parent's ending waits only for the
-- other parents of its gate (32 of them at most, consecutive ids spread over the gates).

ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled', 'cancelled', 'unknown',
                     'waiting'))
    NOT VALID;

-- Whether a batch is a workflow's, its name, and when an operator cancelled it.
ALTER TABLE pgq.batches ADD COLUMN workflow boolean NOT NULL DEFAULT false;
ALTER TABLE pgq.batches ADD COLUMN workflow_name text;
ALTER TABLE pgq.batches ADD COLUMN cancelled_at timestamptz;

-- One row per step, kept after its job row is gone (a completion deletes it): what `workflows
-- show` and a child's `job.parents` read. Updated when the step ends and when its gates empty.
--
-- No foreign keys in the three workflow tables: a workflow is written whole by one statement
-- (sql/workflows.sql, enqueue_workflow) and removed whole by the purge of its batch
-- (purge_batches), and the checks cost a 10,000-step enqueue half its time (0.3 of 0.5 s).
CREATE TABLE pgq.workflow_steps (
    job_id             bigint      PRIMARY KEY,
    workflow_id        bigint      NOT NULL,
    position           integer     NOT NULL,
    kind               text        NOT NULL,
    queue              text        NOT NULL,
    on_parent_failure  text        NOT NULL DEFAULT 'cancel',
    parents            integer     NOT NULL,
    shards             integer     NOT NULL,
    shards_left        integer     NOT NULL,
    -- Seconds from the release to when it is due (NewJob.delay of a step with parents).
    delay              float8      NOT NULL DEFAULT 0,
    -- How it ended: 'completed', 'discarded' or 'cancelled'; null while it has not.
    outcome            text,
    -- Why it was cancelled without running: 'parent' (a parent failed), 'workflow' (the
    -- workflow was cancelled); null otherwise. A replay re-opens only the 'parent' ones.
    cause              text,
    released_at        timestamptz,
    ended_at           timestamptz,
    CONSTRAINT workflow_steps_policy_check CHECK (on_parent_failure IN ('cancel', 'run')),
    CONSTRAINT workflow_steps_shards_check CHECK (shards >= 1 AND shards_left >= 0)
) WITH (
    fillfactor = 70
);

CREATE INDEX workflow_steps_workflow ON pgq.workflow_steps (workflow_id, position);

CREATE TABLE pgq.workflow_edges (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);

-- A child's parents: its `job.parents`, the gates' recount after a replay.
CREATE INDEX workflow_edges_child ON pgq.workflow_edges (child_id, parent_id);

CREATE TABLE pgq.workflow_gates (
    child_id   bigint  NOT NULL,
    shard      integer NOT NULL,
    remaining  integer NOT NULL,
    PRIMARY KEY (child_id, shard),
    CONSTRAINT workflow_gates_remaining_check CHECK (remaining >= 0)
) WITH (
    -- Decrements are HOT updates (no indexed column changes) when the page has room.
    fillfactor = 50
);

-- The functions below are also in sql/functions/ (batch_count, batch_ended, workflow_parents,
-- workflow_ended, batch_uncount, workflow_reopen, workflow_cancel), one file each, for the
-- functions' files that migrate applies after the migrations (layout, issue 29): once that is
-- in, those files are the current bodies and these copies can go (keep the rename).
--
-- 0018's batch_ended keeps its body under a new name: the batches' counting alone.
ALTER FUNCTION pgq.batch_ended(bigint[], bigint[], text[]) RENAME TO batch_count;

-- Counts members that ended, as before (pgq.batch_count), then hands the steps of workflows
-- among them to pgq.workflow_ended. The signature every ending statement calls is unchanged.
CREATE FUNCTION pgq.batch_ended(job_ids bigint[], batch_ids bigint[], outcomes text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    finished  integer;
    step_ids  bigint[];
    step_outs text[];
BEGIN
    finished := pgq.batch_count(job_ids, batch_ids, outcomes);
    SELECT array_agg(e.job_id ORDER BY e.job_id), array_agg(e.outcome ORDER BY e.job_id)
    INTO step_ids, step_outs
    FROM unnest(job_ids, batch_ids, outcomes) AS e(job_id, batch_id, outcome)
    JOIN pgq.batches AS b ON b.id = e.batch_id
    WHERE b.workflow;
    IF step_ids IS NOT NULL THEN
        PERFORM pgq.workflow_ended(step_ids, step_outs);
    END IF;
    RETURN finished;
END;
$$;

-- What a step's handler sees as `job.parents`: each parent's id, kind, outcome and result, in
-- the order the parents were added.
CREATE FUNCTION pgq.workflow_parents(child bigint)
RETURNS jsonb
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', p.job_id, 'kind', p.kind, 'state', p.outcome, 'result', r.result)
               ORDER BY p.position), '[]'::jsonb)
    FROM pgq.workflow_edges AS e
    JOIN pgq.workflow_steps AS p ON p.job_id = e.parent_id
    LEFT JOIN pgq.job_results AS r ON r.id = p.job_id
    WHERE e.child_id = child;
$$;

-- Steps job_ids[i] ended as outcomes[i] ('completed', 'discarded', 'cancelled'). Records it on
-- their step rows, counts down their children's gates, cancels the children that a failed
-- parent cancels (on_parent_failure 'cancel'), and releases the children whose last gate
-- emptied. The cancelled children end in turn, so this repeats down the graph (a loop, not a
-- recursion: a chain of 10,000 steps is 10,000 rounds, not 10,000 nested calls). Returns how
-- many steps it released.
CREATE FUNCTION pgq.workflow_ended(job_ids bigint[], outcomes text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ids          bigint[] := job_ids;
    outs         text[] := outcomes;
    emptied_ids  bigint[];
    emptied_ns   integer[];
    ready        bigint[];
    doomed       bigint[];
    released     integer := 0;
    n            integer;
    queues       text[];
    later        boolean;
BEGIN
    LOOP
        UPDATE pgq.workflow_steps AS s
        SET outcome = e.outcome,
            ended_at = now()
        FROM unnest(ids, outs) AS e(id, outcome)
        WHERE s.job_id = e.id;

        -- The gates of the children still waiting, locked in (child, shard) order; only
        -- through `locked`. A child no longer waiting (released, cancelled) has no use for
        -- its gates, and a replayed parent ends a second time: a child it released before is
        -- not counted down twice (a re-opened child's gates are counted afresh instead, by
        -- pgq.workflow_reopen).
        WITH deltas AS (
            SELECT ed.child_id, (ed.parent_id % c.shards)::integer AS shard,
                   count(*)::integer AS n
            FROM unnest(ids) AS p(id)
            JOIN pgq.workflow_edges AS ed ON ed.parent_id = p.id
            JOIN pgq.workflow_steps AS c ON c.job_id = ed.child_id
            JOIN pgq.jobs AS cj ON cj.id = ed.child_id
            WHERE cj.state = 'waiting'
            GROUP BY 1, 2
        ),
        locked AS (
            SELECT d.*
            FROM pgq.workflow_gates AS g
            JOIN deltas AS d ON d.child_id = g.child_id AND d.shard = g.shard
            ORDER BY g.child_id, g.shard
            FOR UPDATE OF g
        ),
        counted AS (
            UPDATE pgq.workflow_gates AS g
            SET remaining = g.remaining - l.n
            FROM locked AS l
            WHERE g.child_id = l.child_id
              AND g.shard = l.shard
            RETURNING g.child_id, g.remaining
        )
        SELECT array_agg(child_id ORDER BY child_id), array_agg(k ORDER BY child_id)
        INTO emptied_ids, emptied_ns
        FROM (
            SELECT child_id, count(*)::integer AS k
            FROM counted
            WHERE remaining = 0
            GROUP BY child_id
        ) AS e;

        ready := NULL;
        IF emptied_ids IS NOT NULL THEN
            WITH locked AS (
                SELECT s.job_id
                FROM pgq.workflow_steps AS s
                WHERE s.job_id = ANY(emptied_ids)
                ORDER BY s.job_id
                FOR UPDATE
            ),
            left_ AS (
                UPDATE pgq.workflow_steps AS s
                SET shards_left = s.shards_left - e.n
                FROM unnest(emptied_ids, emptied_ns) AS e(id, n)
                JOIN locked AS l ON l.job_id = e.id
                WHERE s.job_id = e.id
                RETURNING s.job_id, s.shards_left
            )
            SELECT array_agg(job_id ORDER BY job_id) INTO ready
            FROM left_
            WHERE shards_left = 0;
        END IF;

        -- A failed parent cancels its waiting 'cancel' children now (not when their other
        -- parents end); fenced on 'waiting', so a child already cancelled is left alone.
        -- Completions alone (the usual round) skip the statement.
        doomed := NULL;
        IF 'discarded' = ANY(outs) OR 'cancelled' = ANY(outs) THEN
            WITH cancelled AS (
                UPDATE pgq.jobs AS j
                SET state = 'cancelled',
                    finished_at = now()
                WHERE j.id = ANY(ARRAY(
                        SELECT DISTINCT ed.child_id
                        FROM unnest(ids, outs) AS p(id, outcome)
                        JOIN pgq.workflow_edges AS ed ON ed.parent_id = p.id
                        JOIN pgq.workflow_steps AS c ON c.job_id = ed.child_id
                        WHERE p.outcome IN ('discarded', 'cancelled')
                          AND c.on_parent_failure = 'cancel'
                        ORDER BY 1))
                  AND j.state = 'waiting'
                RETURNING j.id
            ),
            caused AS (
                UPDATE pgq.workflow_steps AS s
                SET cause = 'parent'
                FROM cancelled AS c
                WHERE s.job_id = c.id
                RETURNING s.job_id
            )
            SELECT array_agg(job_id ORDER BY job_id) INTO doomed FROM caused;
        END IF;

        IF ready IS NOT NULL THEN
            WITH woken AS (
                UPDATE pgq.jobs AS j
                SET state = CASE WHEN s.delay > 0 THEN 'scheduled' ELSE 'available' END,
                    run_at = now() + make_interval(secs => s.delay),
                    batch = jsonb_build_object('workflow', s.workflow_id,
                                               'parents', pgq.workflow_parents(j.id))
                FROM pgq.workflow_steps AS s
                WHERE j.id = ANY(ready)
                  AND s.job_id = j.id
                  AND j.state = 'waiting'
                RETURNING j.id, j.queue, j.state, j.run_at
            ),
            stamped AS (
                UPDATE pgq.workflow_steps AS s
                SET released_at = now()
                FROM woken AS w
                WHERE s.job_id = w.id
            )
            SELECT count(*)::integer,
                   array_agg(DISTINCT queue) FILTER (WHERE state = 'available'),
                   coalesce(bool_or(state = 'scheduled' AND pgq.wakes_stagers(run_at)), false)
            INTO n, queues, later
            FROM woken;
            released := released + n;
            -- As enqueue_many: a queue is woken when some supervisor asked to be (0021); a
            -- step due later wakes the stagers when due before their next look (0036).
            PERFORM pgq.take_wakeups(q)
            FROM unnest(queues) AS q
            WHERE EXISTS (SELECT FROM pgq.queue_wakeups AS f WHERE f.queue = q AND f.wanted);
            IF later THEN
                PERFORM pg_notify('pgq_scheduled', '');
            END IF;
        END IF;

        EXIT WHEN doomed IS NULL;
        -- The cancelled children are members of the workflow's batch: counted there, then
        -- ended in the next round (their own children).
        PERFORM pgq.batch_count(doomed, ARRAY(
                    SELECT s.workflow_id FROM unnest(doomed) WITH ORDINALITY AS d(id, i)
                    JOIN pgq.workflow_steps AS s ON s.job_id = d.id ORDER BY d.i),
                array_fill('cancelled'::text, ARRAY[cardinality(doomed)]));
        ids := doomed;
        outs := array_fill('cancelled'::text, ARRAY[cardinality(doomed)]);
    END LOOP;
    RETURN released;
END;
$$;

-- Gives back to their batches the count of members that are running again (a replayed dead
-- step, the descendants it re-opens): ended as outcomes[i], each is no longer ended.
CREATE FUNCTION pgq.batch_uncount(job_ids bigint[], batch_ids bigint[], outcomes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    filled_ids  bigint[];
    filled_ns   integer[];
BEGIN
    WITH deltas AS (
        SELECT e.batch_id, (e.job_id % bt.shards)::integer AS shard, count(*)::integer AS n,
               count(*) FILTER (WHERE e.outcome = 'completed')::integer AS completed,
               count(*) FILTER (WHERE e.outcome = 'discarded')::integer AS discarded,
               count(*) FILTER (WHERE e.outcome = 'cancelled')::integer AS cancelled
        FROM unnest(job_ids, batch_ids, outcomes) AS e(job_id, batch_id, outcome)
        JOIN pgq.batches AS bt ON bt.id = e.batch_id
        GROUP BY 1, 2
    ),
    locked AS (
        SELECT d.*, s.remaining AS before
        FROM pgq.batch_shards AS s
        JOIN deltas AS d ON d.batch_id = s.batch_id AND d.shard = s.shard
        ORDER BY s.batch_id, s.shard
        FOR UPDATE OF s
    ),
    counted AS (
        UPDATE pgq.batch_shards AS s
        SET remaining = s.remaining + l.n,
            completed = s.completed - l.completed,
            discarded = s.discarded - l.discarded,
            cancelled = s.cancelled - l.cancelled
        FROM locked AS l
        WHERE s.batch_id = l.batch_id
          AND s.shard = l.shard
        RETURNING s.batch_id, s.remaining - l.n AS before
    )
    SELECT array_agg(batch_id ORDER BY batch_id), array_agg(k ORDER BY batch_id)
    INTO filled_ids, filled_ns
    FROM (SELECT batch_id, count(*)::integer AS k FROM counted WHERE before = 0
          GROUP BY batch_id) AS f;
    IF filled_ids IS NOT NULL THEN
        WITH locked AS (
            SELECT bt.id FROM pgq.batches AS bt WHERE bt.id = ANY(filled_ids)
            ORDER BY bt.id FOR UPDATE
        )
        UPDATE pgq.batches AS bt
        SET shards_left = bt.shards_left + f.n,
            finished_at = NULL
        FROM unnest(filled_ids, filled_ns) AS f(id, n)
        JOIN locked AS l ON l.id = f.id
        WHERE bt.id = f.id;
    END IF;
END;
$$;

-- Steps job_ids were replayed (dead letters back to 'available'): they run again, and once
-- they end their children are released "as if they had completed then". Re-opens with them
-- every descendant that a failed parent cancelled before it started ('waiting' again) when no
-- parent outside the re-opened set failed too, un-counts all of them in their batch, and counts
-- the gates of every waiting child of theirs again from its parents' outcomes (under the gates'
-- and the steps' row locks, so an ending in flight counts down the new values). Returns how many
-- steps it re-opened besides the replayed ones.
CREATE FUNCTION pgq.workflow_reopen(job_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    opened    bigint[] := job_ids;
    frontier  bigint[] := job_ids;
    nxt       bigint[];
    targets   bigint[];
BEGIN
    LOOP
        SELECT array_agg(DISTINCT c.job_id ORDER BY c.job_id) INTO nxt
        FROM pgq.workflow_edges AS e
        JOIN pgq.workflow_steps AS c ON c.job_id = e.child_id
        JOIN pgq.jobs AS j ON j.id = c.job_id
        WHERE e.parent_id = ANY(frontier)
          AND c.cause = 'parent'
          AND j.state = 'cancelled'
          AND j.started_at IS NULL
          AND NOT c.job_id = ANY(opened)
          AND NOT EXISTS (
              SELECT 1
              FROM pgq.workflow_edges AS e2
              JOIN pgq.workflow_steps AS p ON p.job_id = e2.parent_id
              WHERE e2.child_id = c.job_id
                AND p.outcome IN ('discarded', 'cancelled')
                AND NOT p.job_id = ANY(opened));
        EXIT WHEN nxt IS NULL;
        UPDATE pgq.jobs
        SET state = 'waiting',
            finished_at = NULL,
            cancel_requested_at = NULL
        WHERE id = ANY(nxt)
          AND state = 'cancelled';
        opened := opened || nxt;
        frontier := nxt;
    END LOOP;

    PERFORM pgq.batch_uncount(
        ARRAY(SELECT s.job_id FROM pgq.workflow_steps AS s
              WHERE s.job_id = ANY(opened) AND s.outcome IS NOT NULL ORDER BY s.job_id),
        ARRAY(SELECT s.workflow_id FROM pgq.workflow_steps AS s
              WHERE s.job_id = ANY(opened) AND s.outcome IS NOT NULL ORDER BY s.job_id),
        ARRAY(SELECT s.outcome FROM pgq.workflow_steps AS s
              WHERE s.job_id = ANY(opened) AND s.outcome IS NOT NULL ORDER BY s.job_id));
    UPDATE pgq.workflow_steps
    SET outcome = NULL,
        cause = NULL,
        ended_at = NULL,
        released_at = CASE WHEN job_id = ANY(job_ids) THEN now() END
    WHERE job_id = ANY(opened);

    SELECT array_agg(DISTINCT e.child_id ORDER BY e.child_id) INTO targets
    FROM pgq.workflow_edges AS e
    JOIN pgq.jobs AS j ON j.id = e.child_id
    WHERE e.parent_id = ANY(opened)
      AND j.state = 'waiting';
    IF targets IS NOT NULL THEN
        PERFORM 1 FROM pgq.workflow_gates AS g
        WHERE g.child_id = ANY(targets) ORDER BY g.child_id, g.shard FOR UPDATE;
        PERFORM 1 FROM pgq.workflow_steps AS s
        WHERE s.job_id = ANY(targets) ORDER BY s.job_id FOR UPDATE;
        UPDATE pgq.workflow_gates AS g
        SET remaining = (
            SELECT count(*)
            FROM pgq.workflow_edges AS e
            JOIN pgq.workflow_steps AS p ON p.job_id = e.parent_id
            WHERE e.child_id = g.child_id
              AND (e.parent_id % c.shards)::integer = g.shard
              AND p.outcome IS NULL)
        FROM pgq.workflow_steps AS c
        WHERE g.child_id = ANY(targets)
          AND c.job_id = g.child_id;
        UPDATE pgq.workflow_steps AS s
        SET shards_left = (SELECT count(*) FROM pgq.workflow_gates AS g
                           WHERE g.child_id = s.job_id AND g.remaining > 0)
        WHERE s.job_id = ANY(targets);
    END IF;
    RETURN cardinality(opened) - cardinality(job_ids);
END;
$$;

-- Cancels every step of workflow w that has not started (waiting, available or scheduled),
-- counts them in its batch, and marks it cancelled. Running steps finish; their children are
-- cancelled already, so nothing more is released. No gate is touched: every step that could
-- be released is cancelled here, so no lock is taken in the endings' order in reverse.
-- Returns how many steps it cancelled.
CREATE FUNCTION pgq.workflow_cancel(w bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    doomed  bigint[];
BEGIN
    PERFORM 1 FROM pgq.batches WHERE id = w AND workflow FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH cancelled AS (
        UPDATE pgq.jobs AS j
        SET state = 'cancelled',
            finished_at = now(),
            cancel_requested_at = now()
        WHERE j.id = ANY(ARRAY(SELECT s.job_id FROM pgq.workflow_steps AS s
                               WHERE s.workflow_id = w AND s.outcome IS NULL
                               ORDER BY s.job_id))
          AND j.state IN ('waiting', 'available', 'scheduled')
        RETURNING j.id
    ),
    stepped AS (
        UPDATE pgq.workflow_steps AS s
        SET outcome = 'cancelled',
            cause = 'workflow',
            ended_at = now()
        FROM cancelled AS c
        WHERE s.job_id = c.id
        RETURNING s.job_id
    )
    SELECT array_agg(job_id ORDER BY job_id) INTO doomed FROM stepped;
    UPDATE pgq.batches SET cancelled_at = coalesce(cancelled_at, now()) WHERE id = w;
    IF doomed IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pgq.batch_count(doomed, array_fill(w, ARRAY[cardinality(doomed)]),
                            array_fill('cancelled'::text, ARRAY[cardinality(doomed)]));
    RETURN cardinality(doomed);
END;
$$;
