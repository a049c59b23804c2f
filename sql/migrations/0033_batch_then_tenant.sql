-- A batch's `then` job keeps the tenant and the trace context it was given (issue 22: tenant= on
-- every enqueue path; issue 25: a job continues its enqueuer's trace). 0018 stored neither, so
-- the `then` job ran as the tenant '' and outside the enqueuer's trace.
--
-- Nullable columns without defaults: no rewrite. A supervisor from before this migration
-- creates batches without them (null): their `then` jobs run as before.

ALTER TABLE pgq.batches ADD COLUMN then_tenant text;
ALTER TABLE pgq.batches ADD COLUMN then_traceparent text;

-- As 0018's, with the two columns carried to the job.
-- pgq.batch_finish: its definition is sql/functions/batch_finish.sql (applied after the migrations).
