-- Autovacuum leaves the empty pages at the end of pgq.jobs and pgq.wakeup_flags too (issue 36).
--
-- Giving them back (VACUUM's truncation) takes an ACCESS EXCLUSIVE lock on the table, taken
-- and yielded again while VACUUM reads back from the end: every claim (and, for the flags, every
-- enqueue that looks at them) waits on it meanwhile. After a long-held xmin horizon the tail is
-- large (1.6 GB of pgq.jobs after 30 minutes at 3,000 jobs/s) and the claims waited for 20 s in
-- all. The supervisor's own vacuum has not truncated since its VACUUM (TRUNCATE false); this
-- makes the server's autovacuum do the same. The queue refills the pages; VACUUM (TRUNCATE)
-- pgq.jobs, which overrides the setting, gives them back at a quiet hour.
--
-- Setting it takes a SHARE UPDATE EXCLUSIVE lock, which claims and enqueues do not wait on (only
-- a VACUUM or an ANALYZE under way, as the migration waits on them).
ALTER TABLE pgq.jobs SET (vacuum_truncate = false);
ALTER TABLE pgq.wakeup_flags SET (vacuum_truncate = false);
