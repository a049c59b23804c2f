-- pgq:no-transaction
-- A debounce replaces its key's follower still waiting (issue 33): `enqueue(..., unique_key=K,
-- debounce=S, order_key=O)` while a job debounced with K waits behind O's head replaces that
-- job's arguments and moves its run_at, instead of adding a second follower (pgq.enqueue).
-- jobs_debounce_key (0065) covers available and scheduled jobs only, so this partial index finds
-- such a follower by its debounce key in one probe, however many followers its key has. Built
-- CONCURRENTLY (a plain build holds a SHARE lock on pgq.jobs that every enqueue and claim would
-- wait behind), and empty until a debounced job waits behind its key.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_debounce_waiting ON pgq.jobs (debounce_key)
    WHERE debounce_key IS NOT NULL
      AND state = 'waiting';
