-- pgq.batch_finish: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0033 before the functions had files of their own.
--
-- As 0018's, with the two columns carried to the job.

CREATE OR REPLACE FUNCTION pgq.batch_finish(b bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec    pgq.batches%ROWTYPE;
    counts  jsonb;
    job_id  bigint;
BEGIN
    SELECT * INTO spec FROM pgq.batches WHERE id = b;
    IF spec.finished_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT jsonb_build_object(
               'id', b,
               'total', spec.total,
               'completed', coalesce(sum(s.completed), 0),
               'discarded', coalesce(sum(s.discarded), 0),
               'cancelled', coalesce(sum(s.cancelled), 0))
    INTO counts
    FROM pgq.batch_shards AS s
    WHERE s.batch_id = b;
    IF spec.then_kind IS NOT NULL THEN
        INSERT INTO pgq.jobs (queue, kind, args, priority, max_attempts, run_at, state, batch,
                              tenant, traceparent)
        VALUES (spec.then_queue, spec.then_kind, spec.then_args, spec.then_priority,
                spec.then_max_attempts, now() + make_interval(secs => spec.then_delay),
                CASE WHEN spec.then_delay > 0 THEN 'scheduled' ELSE 'available' END, counts,
                spec.then_tenant, spec.then_traceparent)
        RETURNING id INTO job_id;
        IF spec.then_delay > 0 THEN
            PERFORM pg_notify('pgq_scheduled', '');
        ELSE
            PERFORM pg_notify('pgq_jobs', spec.then_queue);
        END IF;
    END IF;
    UPDATE pgq.batches
    SET finished_at = now(),
        then_job_id = job_id
    WHERE id = b;
    RETURN job_id;
END;
$$;
