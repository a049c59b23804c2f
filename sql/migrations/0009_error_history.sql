-- Every error a job met, not only the last (issue 14: a job's page shows them all), and a
-- finished job found in the history by its id.
--
-- pgq.jobs.errors is a jsonb array, oldest first, of
--     {"seq": n, "attempt": a, "at": "2024-05-01T03:00:00.000000+00:00", "error": text}
-- appended by every write that records last_error (settle with an error, requeue of a dead
-- worker's job that spent its attempt, rescue of an expired lease), through pgq.error_kept
-- below. last_error stays as it was (a contract); errors is the same texts, kept. A healthy job
-- pays nothing: the column has no default (adding it rewrites no row), stays NULL until a
-- failure, and neither the claim nor a completion writes it.
--
-- "seq" numbers a job's errors from 1 and never restarts (attempt does: a replay resets the
-- attempts to 0), so once older entries were dropped the first kept one says how many:
-- seq - 1. "at" is written in UTC with six fractional digits, whatever the session's TimeZone,
-- so every reader (Python 3.10's datetime.fromisoformat included) parses it the same way.

ALTER TABLE pgq.jobs ADD COLUMN errors jsonb;

-- Completed, discarded and cancelled jobs carry their errors into the history (null for a job
-- that never failed). On the partitioned table it reaches every partition; new partitions copy
-- it through LIKE.
ALTER TABLE pgq.job_history ADD COLUMN errors jsonb;

-- A job's page looks a finished job up by id: that index (job_history_id) is built by 0041, one
-- partition at a time. It was built here, inside this transaction, after the ADD COLUMN above
-- took pgq.jobs' exclusive lock: on an upgrade from 0008 or earlier, every enqueue, claim and
-- completion waited for the build of every history partition (issue 30).

-- The errors after `error` is added for `attempt`: the most recent 25, oldest first; `errors`
-- unchanged when `error` is null (a write that keeps last_error). A single SELECT without SET
-- or STRICT, so the planner inlines it into the statements that call it. The 24 in the path
-- keeps 24 old entries beside the new one; jsonpath's lax mode clamps it for shorter arrays.
-- pgq.error_kept: its definition from here on is sql/functions/error_kept.sql (applied after the migrations).
