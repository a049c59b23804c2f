-- pgq.workflow_ended: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0050 (workflows, issue 32).
--
-- Steps job_ids[i] ended as outcomes[i] ('completed', 'discarded', 'cancelled'). Records it on
-- their step rows, counts down their children's gates, cancels the children that a failed
-- parent cancels (on_parent_failure 'cancel'), and releases the children whose last gate
-- emptied. The cancelled children end in turn, so this repeats down the graph (a loop, not a
-- recursion: a chain of 10,000 steps is 10,000 rounds, not 10,000 nested calls). Returns how
-- many steps it released.
--
-- A released step with an order key (0068) joins its key then (pgq.order_join): it is due at
-- once when the key is free, otherwise it waits ('waiting', its order_key now set) behind the
-- key's head. Such a follower no longer waits for parents: its gates are not counted down again
-- (a replayed parent ends a second time) and a parent's failure does not cancel it.

CREATE OR REPLACE FUNCTION pgq.workflow_ended(job_ids bigint[], outcomes text[])
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
    followers    bigint[];
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
              AND cj.order_key IS NULL
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
                  AND j.order_key IS NULL
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
            -- The ready steps with an order key join it (0068), their job rows locked first (in
            -- id order), so that one cancelled meanwhile does not join; the key's row is taken
            -- after the gates', as every ending takes it (batch_ended before order_ended).
            SELECT pgq.order_join(array_agg(t.queue), array_agg(t.order_key), array_agg(t.id))
            INTO followers
            FROM (
                SELECT j.id, j.queue, s.order_key
                FROM pgq.jobs AS j
                JOIN pgq.workflow_steps AS s ON s.job_id = j.id
                WHERE j.id = ANY(ready)
                  AND s.order_key IS NOT NULL
                  AND j.state = 'waiting'
                ORDER BY j.id
                FOR UPDATE OF j
            ) AS t;
            WITH woken AS (
                UPDATE pgq.jobs AS j
                SET state = CASE WHEN j.id = ANY(followers) THEN 'waiting'
                                 WHEN s.delay > 0 THEN 'scheduled' ELSE 'available' END,
                    order_key = s.order_key,
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
            FROM unnest(queues) AS q;
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
