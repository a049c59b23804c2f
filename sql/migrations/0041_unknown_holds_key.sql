-- pgq:no-transaction
-- An unknown job holds its unique key (issue 30). Until now the unique index covered available,
-- running and scheduled jobs only, so while an `effects: external` job's outcome was being
-- reconciled, an enqueue with its key (`charge:ORDER`, from a retried request) made a second job,
-- which charged again; and resolving the first as `retry` then failed on the index.
--
-- jobs_unique_key_held covers unknown jobs as well. Built CONCURRENTLY: a plain build scans the
-- whole of pgq.jobs holding a SHARE lock that every enqueue and claim would wait behind.
--
-- Why jobs_unique_key stays, and why `id > 0` (always true: ids come from an identity from 1):
-- ON CONFLICT takes as arbiters the unique indexes its WHERE implies. The previous release's
-- statements say `WHERE unique_key IS NOT NULL AND state IN ('available', 'running',
-- 'scheduled')`. Without the `id > 0`, that implies this index too, and such a client meeting an
-- unknown holder inserts nothing, then looks for a holder among the three states, finds none and
-- tries again: pgq-supervisor's enqueue looped forever during a rolling upgrade. With it, they
-- infer jobs_unique_key alone, and this index refuses their insert (a UniqueViolation naming the
-- key: loud, and no second job). This release's statements add `AND id > 0` to that WHERE and so
-- infer both indexes: a concurrent enqueue of the same key waits and returns the holder, never
-- fails on the index it did not arbitrate. jobs_unique_key goes in a later release, once no
-- previous-release client is left.
CALL pgq.index_history_by_id();
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_unique_key_held ON pgq.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('available', 'running', 'scheduled', 'unknown')
      AND id > 0;
