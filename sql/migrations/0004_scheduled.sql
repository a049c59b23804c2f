-- Jobs waiting for a future run_at get a state of their own, outside the claim index.
--
-- jobs_claim orders by priority first, so future jobs kept there at a higher priority than the
-- due ones were stepped over by every claim (200,000 of them made a claim cost 33.8 ms instead
-- of 0.15 ms). A scheduled job lives in a small index on run_at instead, and the master's
-- stager moves it to available when it falls due.

ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled'));

-- Serves the stager (due jobs, oldest first) and the master's wake-up (the earliest run_at is
-- the first entry).
CREATE INDEX jobs_scheduled ON pgq.jobs (run_at)
    WHERE state = 'scheduled';

-- A unique key holds while its job waits (now or for later) or runs.
DROP INDEX pgq.jobs_unique_key;
CREATE UNIQUE INDEX jobs_unique_key ON pgq.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled');

-- Future jobs written before this migration leave the claim index.
UPDATE pgq.jobs
SET state = 'scheduled'
WHERE state = 'available'
  AND run_at > now();

-- The last tick each periodic schedule (`schedules:` in the YAML) enqueued. Advancing it is
-- what gives a supervisor the right to enqueue a tick, so among any number of supervisors
-- exactly one enqueues it, and a restarted one knows which ticks it missed.
CREATE TABLE pgq.schedules (
    name         text        PRIMARY KEY,
    last_tick    timestamptz NOT NULL,
    last_job_id  bigint,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
