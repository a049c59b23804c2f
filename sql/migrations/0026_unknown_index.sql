-- pgq:no-transaction
-- The reconciler's work list (issue 23): unknown jobs by when their hook is next due (run_at; a
-- hook that failed pushes it back). Almost always empty, and only unknown rows are indexed. Built
-- CONCURRENTLY, outside a transaction: a plain build scans the whole of pgq.jobs holding a SHARE
-- lock, and every enqueue, claim and completion on every host would wait for it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_unknown ON pgq.jobs (run_at)
    WHERE state = 'unknown';
