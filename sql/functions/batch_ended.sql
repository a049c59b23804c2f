-- pgq.batch_ended: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0050 (workflows): 0018's body is pgq.batch_count now.
--
-- Counts members that ended, as before (pgq.batch_count), then hands the steps of workflows
-- among them to pgq.workflow_ended. The signature every ending statement calls is unchanged.

CREATE OR REPLACE FUNCTION pgq.batch_ended(job_ids bigint[], batch_ids bigint[], outcomes text[])
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
