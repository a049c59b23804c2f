-- Supervisors starting together no longer queue on the partition lock: the first one makes the
-- partitions and the others return 0 at once. Queued starters waited under the function's 200 ms
-- lock_timeout and failed with lock_not_available whenever the first one's DDL took longer, as
-- it does on a loaded host. The history table's default partition takes any history written
-- before the first starter commits. Otherwise as in 0006.
-- pgq.ensure_history_partitions: its definition is sql/functions/ensure_history_partitions.sql (applied after the migrations).

-- (EXECUTE on pgq.ensure_history_partitions revoked from PUBLIC here: sql/functions/ensure_history_partitions.sql)
