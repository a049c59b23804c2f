-- pgq:no-transaction
-- The arbiter of debounced enqueues (0064): one not-yet-started job per debounce key. Built
-- CONCURRENTLY (a plain build holds a SHARE lock on pgq.jobs that every enqueue and claim would
-- wait behind); it is empty until a debounced job is enqueued, so the build reads the table once.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_debounce_key ON pgq.jobs (debounce_key)
    WHERE debounce_key IS NOT NULL
      AND state IN ('available', 'scheduled')
      AND started_at IS NULL;
