-- pgq.workflow_parents: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0050 (workflows, issue 32).
--
-- What a step's handler sees as `job.parents`: each parent's id, kind, outcome and result, in
-- the order the parents were added.

CREATE OR REPLACE FUNCTION pgq.workflow_parents(child bigint)
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
