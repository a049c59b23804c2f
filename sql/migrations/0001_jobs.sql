-- The job table, its indexes, and the sequence that hands out fencing tokens.
--
-- A successful job is deleted, so the table holds the backlog, the jobs in flight and the
-- dead letters. Everything the claim filters or sorts on is a real column so the partial
-- index can serve it; arguments stay in jsonb.

CREATE SEQUENCE pgq.lease_seq AS bigint NO CYCLE;

CREATE TABLE pgq.jobs (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text        NOT NULL DEFAULT 'default',
    kind          text        NOT NULL,
    args          jsonb       NOT NULL DEFAULT '{}',
    priority      smallint    NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL DEFAULT now(),
    state         text        NOT NULL DEFAULT 'available',
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 10,
    -- The fence of the current claim: a fresh value from pgq.lease_seq on every claim, never
    -- reused, so a write from an earlier owner can never match (even after a release gave
    -- the attempt back and the attempt number repeats).
    lease_id      bigint,
    -- The claiming worker's identity, unique per process incarnation (host:pid:random).
    locked_by     text,
    lease_until   timestamptz,
    started_at    timestamptz,
    unique_key    text,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CONSTRAINT jobs_state_check CHECK (state IN ('available', 'running', 'discarded')),
    CONSTRAINT jobs_kind_check CHECK (kind <> ''),
    CONSTRAINT jobs_queue_check CHECK (queue <> ''),
    CONSTRAINT jobs_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1),
    -- A job holds a lease (fence, owner, expiry) exactly while it runs. So a write that matches
    -- (id, lease_id) proves the job is still running and still ours, and needs no condition on
    -- state, which would steer generic plans onto the small jobs_lease index (see complete).
    CONSTRAINT jobs_fenced_iff_running CHECK ((state = 'running') = (lease_id IS NOT NULL)),
    CONSTRAINT jobs_running_is_leased CHECK (
        state <> 'running' OR (locked_by IS NOT NULL AND lease_until IS NOT NULL)
    )
) WITH (
    -- Free space in every page lets lease renewals be HOT updates that touch no index.
    fillfactor = 70,
    -- Rows die constantly: vacuum after 1% of them are dead, not the default 20%.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);

-- Serves the claim and nothing else. The column order matches the claim's ORDER BY exactly
-- (priority DESC, run_at, id) after the equality on queue, so a claim reads a few index
-- entries in order and never sorts; only available rows are indexed, so its size tracks the
-- backlog, not the history.
CREATE INDEX jobs_claim ON pgq.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'available';

-- Serves the rescuer (expired leases) and the requeue of a dead worker's jobs.
CREATE INDEX jobs_lease ON pgq.jobs (lease_until)
    WHERE state = 'running';

-- A unique key holds while its job waits or runs; once the job is done or dead, the key is free.
CREATE UNIQUE INDEX jobs_unique_key ON pgq.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('available', 'running');

-- Serves the dead-letter listing and the purge of old dead letters.
CREATE INDEX jobs_discarded ON pgq.jobs (finished_at)
    WHERE state = 'discarded';
