-- Validates the state constraint 0050 added NOT VALID (with 'waiting'). In a transaction of its
-- own, so the scan of pgq.jobs holds only SHARE UPDATE EXCLUSIVE: claims, completions and
-- enqueues go on.
ALTER TABLE pgq.jobs VALIDATE CONSTRAINT jobs_state_check;
