-- Elastic pools (issue 34, docs/elastic-pools.md): each supervisor publishes, with its
-- heartbeat, every pool's size and the scaling decision behind it: {pool: {min, max, desired,
-- actual, need, reason, backlog_seconds, at}}. `status` and the dashboard read it, and each
-- master reads the other live supervisors' max per pool to size only for its share of the
-- fleet's backlog. Null: a supervisor of an earlier release (counted as no capacity).
ALTER TABLE pgq.supervisors ADD COLUMN IF NOT EXISTS scaling jsonb;
