-- The history partition functions, hardened (issue 11). They run with their owner's rights
-- (SECURITY DEFINER), so what a caller may ask of them is bounded here, and only roles granted
-- EXECUTE (the owner, and pgq_worker through sql/roles/worker_role.sql) may call them.

-- Creates the daily partitions from the day of `since` through `days_ahead` days later.
-- `since` must be within two days of now and `days_ahead` at most 31: a caller cannot make the
-- owner create thousands of tables. Supervisors starting at the same moment queue on a
-- transaction advisory lock (key 0x70677105, supervisor/queue/locks.py) instead of racing to
-- create the same table. Attaching a partition locks the history table: it waits at most
-- 200 ms for that (lock_not_available, 55P03), and is tried again later.
-- pgq.ensure_history_partitions: its definition is sql/functions/ensure_history_partitions.sql (applied after the migrations).

-- Drops the oldest daily partition whose whole day ended before `older_than`: one per call,
-- so the exclusive lock DROP takes on pgq.job_history (which every completion writing history
-- needs) is held for one table, not all of them. It waits at most 200 ms for that lock and
-- fails with lock_not_available (55P03) instead of queueing completions behind it; the purge
-- tries again later. Returns how many it dropped (0 or 1).
-- pgq.drop_history_partitions: its definition is sql/functions/drop_history_partitions.sql (applied after the migrations).

-- (EXECUTE on pgq.ensure_history_partitions revoked from PUBLIC here: sql/functions/ensure_history_partitions.sql)
-- (EXECUTE on pgq.drop_history_partitions revoked from PUBLIC here: sql/functions/drop_history_partitions.sql)
