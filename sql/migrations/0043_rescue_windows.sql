-- The rescuer reads expired leases one window of expiry times at a time (sql/leases.sql,
-- rescue_window), from where the last run's windows stopped: a held xmin horizon keeps the
-- entry of every job that ran in jobs_lease, and a rescue that starts at the oldest expiry
-- visits all of them (it ran into the master's 1 s statement timeout every minute over a
-- 600 s hold at 3,000 jobs/s, issue 30). The mark lives on the rescue's own maintenance row,
-- written once per window, so it adds no table and no per-job write. Null until the first
-- windowed run (which starts at the earliest lease of a running job); a supervisor of the
-- previous release ignores the column and rescues as before.
ALTER TABLE pgq.maintenance ADD COLUMN IF NOT EXISTS scanned_through timestamptz;

-- The first windowed run starts at the earliest lease of a job running now (every later claim's
-- lease ends after it), found here, once, rather than by a rescue under the master's statement
-- timeout: with a horizon held at the upgrade, that look walks every entry the hold keeps.
INSERT INTO pgq.maintenance AS m (task, last_run_at, run_by, scanned_through)
SELECT 'rescue', 'epoch', 'migration 0043', coalesce(min(lease_until), now())
FROM pgq.jobs
WHERE state = 'running'
ON CONFLICT (task) DO UPDATE
SET scanned_through = EXCLUDED.scanned_through
WHERE m.scanned_through IS NULL;
