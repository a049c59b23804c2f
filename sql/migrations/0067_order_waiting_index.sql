-- pgq:no-transaction
-- The followers of each key in the order they go (0066): the ending of a key's head takes the
-- first entry of its (queue, key). Partial, so it holds only followers that wait, never the
-- jobs the claim reads; built CONCURRENTLY (a plain build holds a SHARE lock on pgq.jobs that
-- every enqueue and claim would wait behind), and empty until an ordered job is enqueued.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_order_waiting ON pgq.jobs (queue, order_key, id)
    WHERE state = 'waiting'
      AND order_key IS NOT NULL;
