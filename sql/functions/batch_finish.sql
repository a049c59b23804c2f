-- pgq.batch_finish: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed with migration 0068 (the `then` job's order key); before it, 0033 (tenant and
-- trace context carried to the job).
--
-- As 0018's, with the two columns carried to the job. A `then` job with an order key joins its
-- key now, as an enqueue of it would (pgq.order_join): the key free, it is due as usual;
-- otherwise it waits behind the key's head ('waiting', no wake-up: the head's ending releases it).

CREATE OR REPLACE FUNCTION pgq.batch_finish(b bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec    pgq.batches%ROWTYPE;
    counts  jsonb;
    job_id  bigint;
    follows boolean := false;
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
        -- Its id first: the key's row names its head by id.
        job_id := nextval('pgq.jobs_id_seq'::regclass);
        IF spec.then_order_key IS NOT NULL THEN
            follows := cardinality(pgq.order_join(ARRAY[spec.then_queue],
                                                  ARRAY[spec.then_order_key],
                                                  ARRAY[job_id])) > 0;
        END IF;
        INSERT INTO pgq.jobs (id, queue, kind, args, priority, max_attempts, run_at, state, batch,
                              tenant, traceparent, order_key)
        OVERRIDING SYSTEM VALUE
        VALUES (job_id, spec.then_queue, spec.then_kind, spec.then_args, spec.then_priority,
                spec.then_max_attempts, now() + make_interval(secs => spec.then_delay),
                CASE WHEN follows THEN 'waiting'
                     WHEN spec.then_delay > 0 THEN 'scheduled' ELSE 'available' END, counts,
                spec.then_tenant, spec.then_traceparent, spec.then_order_key);
        IF follows THEN
            NULL;
        ELSIF spec.then_delay > 0 THEN
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
