-- pgq:no-transaction
-- A unique key on a job with an order key (issue 33): `enqueue(..., unique_key=U, order_key=K)`.
-- A follower of K waits in state 'waiting', which the unique indexes did not cover (0041), so it
-- could not hold U: a second enqueue of U while it waited would have made a second job. This
-- index covers every state that holds a unique key, 'waiting' included: a follower holds its
-- key from its enqueue until it ends, as every unique key is held. Its predicate is implied by
-- the WHERE of every enqueue's ON CONFLICT (`state IN ('available', 'running', 'scheduled') AND
-- id > 0`, 0041 says why), so it is one of their arbiters: an enqueue of U meeting a waiting
-- holder inserts nothing and returns the holder (every holder look-up names 'waiting' too).
-- No waiting job had a unique key before (workflow steps and followers refused one), so the build
-- finds no duplicate. Built CONCURRENTLY: a plain build holds a SHARE lock on pgq.jobs that every
-- enqueue and claim would wait behind. jobs_unique_key_held (0041) is covered by this one and
-- goes with jobs_unique_key, once no client of a release before 0041 is left.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_unique_key_holder ON pgq.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
      AND id > 0;
