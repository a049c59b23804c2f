-- A running job's progress (issue 34, docs/job-cost.md): what its handler last said through
-- job.progress(fraction, message), written by the child at most about once a second per job
-- (the handler's calls are coalesced in the child) and once more when the attempt ends. One
-- row per job, replaced by each attempt; it stays after the job finished (kept as long as the
-- history), so `jobs show` says how far a finished or failed attempt got.
CREATE TABLE IF NOT EXISTS pgq.job_progress (
    job_id      bigint           PRIMARY KEY,
    attempt     integer          NOT NULL,
    fraction    double precision NOT NULL CHECK (fraction >= 0 AND fraction <= 1),
    message     text,
    updated_at  timestamptz      NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS job_progress_updated ON pgq.job_progress (updated_at);
