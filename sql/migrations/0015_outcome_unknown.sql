-- Outcome unknown (issue 23): a job of a kind with effects outside the database (`jobs: {KIND:
-- {effects: external}}`) whose attempt ended without a recorded outcome (its child died, it hit
-- its hard timeout, its lease ran out, a deploy's shutdown deadline passed) may have done its
-- effect already: it waits in 'unknown' for its reconcile hook or an operator, never retried
-- blindly.
--
-- The state constraint is replaced NOT VALID here, which checks only new rows and holds the
-- table's ACCESS EXCLUSIVE lock for an instant; 0016 validates it under SHARE UPDATE EXCLUSIVE,
-- which lets claims and completions go on. Written in full, every state of every issue.
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled', 'cancelled', 'unknown'))
    NOT VALID;

-- The reconciler's index on unknown jobs is built concurrently, by 0026.

-- Which kinds each live supervisor's YAML declares `effects: external`, written with its
-- heartbeat. The rescuer acts on other hosts' jobs, so the rule it applies is the union of every
-- live supervisor's declaration and its own: a fleet half-way through a deploy that adds (or
-- removes) the declaration errs on the side of 'unknown', never on a second charge. A supervisor
-- that stops heartbeating is pruned, and its declaration with it. NULL: none declared.
ALTER TABLE pgq.supervisors ADD COLUMN external_kinds text[];
