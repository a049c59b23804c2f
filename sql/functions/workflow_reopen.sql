-- pgq.workflow_reopen: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0050 (workflows, issue 32).
--
-- Steps job_ids were replayed (dead letters back to 'available'): they run again, and once
-- they end their children are released "as if they had completed then". Re-opens with them
-- every descendant that a failed parent cancelled before it started ('waiting' again) when no
-- parent outside the re-opened set failed too, un-counts all of them in their batch, and counts
-- the gates of every waiting child of theirs again from its parents' outcomes (under the gates'
-- and the steps' row locks, so an ending in flight counts down the new values). Returns how many
-- steps it re-opened besides the replayed ones.

CREATE OR REPLACE FUNCTION pgq.workflow_reopen(job_ids bigint[])
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
      AND j.state = 'waiting'
      -- A child waiting behind its order key (0068) was released already: no gate to count.
      AND j.order_key IS NULL;
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
