-- Tracing (issue 25): the W3C trace context a job was enqueued under, so that each attempt's
-- span continues the enqueuer's trace (supervisor/observability/tracing.py).
--
-- A column rather than a key in args (which are the handler's keyword arguments) or in errors:
-- 55 bytes for a traced job, a null bit for the others. Cheap on a big live table: a nullable
-- column without a default rewrites no row; the check is NOT VALID, so it holds for new rows
-- without scanning the old ones (all null).

ALTER TABLE pgq.jobs ADD COLUMN traceparent text;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_traceparent_check
    CHECK (traceparent IS NULL OR char_length(traceparent) = 55) NOT VALID;

-- pgq.enqueue gains `traceparent => ...`. A new parameter makes a new signature, so the old one
-- is dropped first: two overloads would make every call by name ambiguous. 0010 gave it
-- `tenant => ...` already, which it keeps.
-- (an older signature of pgq.enqueue was dropped here: sql/functions/enqueue.sql)
-- (an older signature of pgq.enqueue was dropped here: sql/functions/enqueue.sql)

-- Enqueue from any client (psql, Ruby, Go, a trigger) inside the caller's transaction, with
-- the checks of the Python enqueue (supervisor/queue/enqueue.py) and the same row: a test
-- enqueues through both and compares. `traceparent` is the W3C trace context of the enqueuer
-- (docs/how-to/tracing.md). Returns the job's id, or the id of the job already
-- holding unique_key. Wakes idle workers at commit when the job is due now.
-- pgq.enqueue: its definition is sql/functions/enqueue.sql (applied after the migrations).
