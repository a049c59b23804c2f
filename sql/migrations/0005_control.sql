-- Job control: cancelled jobs, cancel requests for running jobs, paused queues, and an enqueue
-- function any client can call.
--
-- A waiting job that is cancelled goes straight to 'cancelled' (it keeps finished_at and is
-- purged with the dead letters). A running job cannot be changed under its owner's fence, so a
-- cancel marks it with cancel_requested_at; the master running it stops it, and every write
-- that ends the claim (settle, requeue after a kill, rescue) turns a requested cancel into
-- 'cancelled' instead of a retry.

-- Every state of every issue that adds one: 'scheduled' (jobs waiting for a future run_at,
-- from 0004) and 'cancelled' (here). Written in full so it is right whichever lands first.
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled', 'cancelled'));

ALTER TABLE pgq.jobs ADD COLUMN cancel_requested_at timestamptz;

-- Cancelled jobs are kept like dead letters: listed by finish time, purged in bounded batches.
CREATE INDEX jobs_cancelled ON pgq.jobs (finished_at)
    WHERE state = 'cancelled';

-- The masters look for cancel requests on their children's jobs every second; only running
-- jobs with a request are indexed, so the look-up reads an index that is almost always empty.
CREATE INDEX jobs_cancel_requests ON pgq.jobs (locked_by)
    WHERE cancel_requested_at IS NOT NULL AND state = 'running';

-- A paused queue has a row here. The claim checks it by primary key once per statement, so
-- every host skips a paused queue from its next claim on, and the pause survives restarts.
CREATE TABLE pgq.queue_pauses (
    queue       text        PRIMARY KEY,
    paused_at   timestamptz NOT NULL DEFAULT now(),
    paused_by   text        NOT NULL DEFAULT current_user
);

ALTER TABLE pgq.job_history DROP CONSTRAINT job_history_outcome_check;
ALTER TABLE pgq.job_history ADD CONSTRAINT job_history_outcome_check
    CHECK (outcome IN ('completed', 'discarded', 'cancelled'));

-- Enqueue from any client (psql, Ruby, Go, a trigger) inside the caller's transaction, with
-- the checks of the Python enqueue (supervisor/queue/enqueue.py) and the same row: a test
-- enqueues through both and compares. Returns the job's id, or the id of the job already
-- holding unique_key. Wakes idle workers at commit when the job is due now.
-- pgq.enqueue: its definition is sql/functions/enqueue.sql (applied after the migrations).
