-- pgq.workflow_cancel: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0050 (workflows, issue 32).
--
-- Cancels every step of workflow w that has not started (waiting, available or scheduled),
-- counts them in its batch, and marks it cancelled. Running steps finish; their children are
-- cancelled already, so nothing more is released. No gate is touched: every step that could
-- be released is cancelled here, so no lock is taken in the endings' order in reverse.
-- Returns how many steps it cancelled.
--
-- Steps with order keys (0068) that had joined their keys leave them as a cancel does
-- (pgq.order_ended: a cancelled head lets its key's next follower go), their keys' rows taken
-- before the steps' job rows, in the order of every ending (see cancel_jobs in control.sql).

CREATE OR REPLACE FUNCTION pgq.workflow_cancel(w bigint)
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
    PERFORM 1
    FROM pgq.order_keys AS o
    WHERE (o.queue, o.key) IN (SELECT j.queue, j.order_key
                               FROM pgq.workflow_steps AS s
                               JOIN pgq.jobs AS j ON j.id = s.job_id
                               WHERE s.workflow_id = w
                                 AND s.outcome IS NULL
                                 AND s.order_key IS NOT NULL
                                 AND j.order_key IS NOT NULL)
    ORDER BY o.queue COLLATE "C", o.key COLLATE "C"
    FOR UPDATE OF o;
    WITH target AS (
        SELECT j.id, j.state
        FROM pgq.jobs AS j
        WHERE j.id = ANY(ARRAY(SELECT s.job_id FROM pgq.workflow_steps AS s
                               WHERE s.workflow_id = w AND s.outcome IS NULL
                               ORDER BY s.job_id))
          AND j.state IN ('waiting', 'available', 'scheduled')
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    cancelled AS (
        UPDATE pgq.jobs AS j
        SET state = 'cancelled',
            finished_at = now(),
            cancel_requested_at = now()
        FROM target AS t
        WHERE j.id = t.id
          AND j.state IN ('waiting', 'available', 'scheduled')
        RETURNING j.id, j.queue, j.order_key, t.state = 'waiting' AS follower
    ),
    ordered AS (
        SELECT pgq.order_ended(array_agg(queue), array_agg(order_key), array_agg(follower))
        FROM cancelled
        WHERE order_key IS NOT NULL
        HAVING count(*) > 0
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
    SELECT array_agg(job_id ORDER BY job_id) INTO doomed
    FROM stepped
    CROSS JOIN (SELECT count(*) FROM ordered) AS o;
    UPDATE pgq.batches SET cancelled_at = coalesce(cancelled_at, now()) WHERE id = w;
    IF doomed IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pgq.batch_count(doomed, array_fill(w, ARRAY[cardinality(doomed)]),
                            array_fill('cancelled'::text, ARRAY[cardinality(doomed)]));
    RETURN cardinality(doomed);
END;
$$;
