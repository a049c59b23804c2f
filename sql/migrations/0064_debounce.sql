-- Debounce (issue 33): `enqueue(..., unique_key=K, debounce=SECONDS)`. While a job enqueued
-- with debounce key K has not started, a new debounced enqueue of K replaces its arguments and
-- moves its run_at to now + SECONDS; once it has started (running, unknown, retrying, ended), a
-- new job is enqueued, due in SECONDS.
--
-- Why a column of its own rather than unique_key: a unique key is held while its job runs and
-- while its outcome is unknown (0041), and a debounced enqueue must then make a second job. So
-- a debounced job keeps its key in debounce_key (unique_key stays NULL): the unique index over
-- it (0065) covers only jobs that have not started (started_at IS NULL: the claim sets it, and
-- nothing clears it, so a job given back, retried or replayed never re-enters the index and
-- cannot collide with the job debounced after it). Debounce keys and unique keys are apart: a
-- plain unique enqueue of K does not meet a debounced job of K.
--
-- A nullable column without a default: a catalog change only, no table rewrite. pgq.enqueue
-- gains `debounce interval`, a new signature: sql/functions/enqueue.sql drops the old one and
-- creates it (its upsert names 0065's index as its arbiter).

ALTER TABLE pgq.jobs ADD COLUMN debounce_key text;
