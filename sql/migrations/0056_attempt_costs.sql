-- What each attempt cost (issue 34, docs/job-cost.md): the CPU seconds and peak memory of every
-- finished attempt (completed, retried, discarded, cancelled, snoozed), written by the child in
-- the round trip that writes its outcome, when history is kept. A table of its own, not columns
-- of pgq.job_history: a job has one history row but many attempts, and the statements that
-- write history (the claim among them) stay as they are. Kept as long as the history
-- (history.keep, by the purge); read by `jobs show`, `status` (per kind and per tenant, the
-- last hour) and the dashboard.
CREATE TABLE IF NOT EXISTS pgq.attempt_costs (
    job_id       bigint           NOT NULL,
    attempt      integer          NOT NULL,
    queue        text             NOT NULL,
    kind         text             NOT NULL,
    tenant       text,
    outcome      text             NOT NULL,
    cpu_seconds  double precision NOT NULL,
    -- Bytes: the attempt's peak resident set (an inline child runs one job at a time); null
    -- where it cannot be told apart (a threaded child's jobs share one address space).
    peak_memory  bigint,
    finished_at  timestamptz      NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS attempt_costs_job ON pgq.attempt_costs (job_id, attempt);
CREATE INDEX IF NOT EXISTS attempt_costs_finished ON pgq.attempt_costs (finished_at);
