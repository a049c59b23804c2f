-- Limits per queue, enforced by every claim on the database (so across every supervisor):
-- at most `concurrency` jobs of the queue running at once, and at most `rate` claims per
-- second from a token bucket holding at most `burst` tokens, refilled on the database's clock.
--
-- The limits themselves are a small table the masters write from their YAML (at start and at
-- each reload: the last writer wins, so a rolling deploy moves the fleet to the new limits as
-- it goes); the claim joins it by primary key, so a queue without a row costs one probe.
--
-- Concurrency is counted from the running jobs themselves, never from a counter: a job leaves
-- 'running' whichever way its claim ends (success, settle, the master's requeue of a dead
-- child, the rescuer's rescue of a crashed host's jobs), so a slot can never leak.
--
-- A claim on a limited queue locks the queue's bucket row first (one short wait behind another
-- claim on the same queue), then counts with a fresh snapshot: that is what keeps two claims
-- on two hosts from both seeing the last free slot. The functions are PL/pgSQL because only a
-- statement inside a function takes a new snapshot after the lock wait; a single SQL
-- statement would count with the snapshot it took before waiting. The counts read the index
-- jobs_running (0014, built concurrently).

CREATE TABLE pgq.queue_limits (
    queue               text        PRIMARY KEY,
    concurrency         integer     CHECK (concurrency > 0),
    rate                float8      CHECK (rate > 0),      -- tokens per second
    burst               integer     CHECK (burst > 0),
    tenant_concurrency  integer     CHECK (tenant_concurrency > 0),
    tenant_rate         float8      CHECK (tenant_rate > 0),
    tenant_burst        integer     CHECK (tenant_burst > 0),
    set_by              text        NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_limits_burst CHECK ((rate IS NULL) = (burst IS NULL)),
    CONSTRAINT queue_limits_tenant_burst CHECK ((tenant_rate IS NULL) = (tenant_burst IS NULL))
);

-- One token bucket per rate-limited queue (tenant = '', per = 'queue') and per tenant of a
-- queue with a per-tenant rate (per = 'tenant'; jobs without a tenant share the tenant '').
-- A missing row is a full bucket. promised_at is the latest wake-up time handed to a claim that
-- found the bucket empty: each such claim is told a later token, so waiting children wake one
-- per token instead of all at once.
CREATE TABLE pgq.limit_buckets (
    queue        text        NOT NULL,
    per          text        NOT NULL CHECK (per IN ('queue', 'tenant')),
    tenant       text        NOT NULL DEFAULT '',
    tokens       float8      NOT NULL,
    refilled_at  timestamptz NOT NULL,
    promised_at  timestamptz,
    PRIMARY KEY (queue, per, tenant)
);

-- Locks (creating it full if missing) and refills one bucket; returns its tokens now.
-- pgq.limit_bucket: its definition is sql/functions/limit_bucket.sql (applied after the migrations).

-- Takes up to p_want tokens from a bucket already refilled by limit_bucket in this
-- transaction; returns how many it took and, when it took none, the seconds until this caller
-- should try again (the next token nobody else was promised).
-- pgq.limit_take_tokens: its definition is sql/functions/limit_take_tokens.sql (applied after the migrations).

-- How many of p_want jobs of p_queue may start now, taking that many tokens. p_finishing
-- (ids) / p_finishing_leases: running jobs this same statement completes, whose slots are
-- free. A queue without a row in pgq.queue_limits allows everything. When none may start,
-- wait says in how many seconds a token is due (null: a concurrency slot must free first,
-- and only a finishing job can tell).
-- pgq.limit_take: its definition is sql/functions/limit_take.sql (applied after the migrations).

-- Gives back tokens taken by limit_take that the claim did not use (fewer jobs were due, or
-- other claims held them): a token counts only for a job that started.
-- pgq.limit_return: its definition is sql/functions/limit_return.sql (applied after the migrations).

-- Limits for each tenant of a queue (`limits: {QUEUE: {per_tenant: {concurrency, rate}}}`):
-- the tenant's running jobs counted from jobs_running (0014), its rate from a token bucket of
-- its own in pgq.limit_buckets (per = 'tenant'; jobs without a tenant are the tenant '').
--
-- Every claim on a queue with limits takes the queue's mutex first (pgq.limit_take, above), so
-- these functions run with every other claim of the queue waiting: they only read while the
-- claim decides, and the claim spends the tenant's tokens for the jobs it took, in the same
-- transaction, before the mutex is released at commit.

-- How many of p_want jobs tenant p_tenant of p_queue may start now. p_finishing /
-- p_finishing_leases: running jobs this statement completes (their slots are free).
-- pgq.tenant_room: its definition is sql/functions/tenant_room.sql (applied after the migrations).

-- Takes p_count tokens from the tenant's bucket for jobs a claim took (nothing for a queue
-- without a per-tenant rate). Now and then (one call in a hundred) it also forgets the queue's
-- tenant buckets that have refilled completely: a missing bucket is a full one, so the table
-- keeps only the tenants that claimed lately, however many tenants come and go.
-- pgq.tenant_spend: its definition is sql/functions/tenant_spend.sql (applied after the migrations).

-- Seconds until the next of the queue's tenants held back by its rate has a token again (null
-- when none is): how long a claim that found nothing it may start can sleep. Only tokens still
-- to come count, so a bucket that refilled meanwhile never makes a caller try again at once.
-- pgq.tenant_wait: its definition is sql/functions/tenant_wait.sql (applied after the migrations).

-- The claim's two ends in one call each, so the claim statement stays small to plan (it is
-- planned afresh at many runs; every CTE and join it holds costs planning time at each).
--
-- limit_take_all: pgq.limit_take for each of p_queues that has limits, in name order (two
-- claims that meet on two limited queues never wait for each other crosswise), with whether
-- each also limits its tenants.
-- pgq.limit_take_all: its definition is sql/functions/limit_take_all.sql (applied after the migrations).

-- limit_finish: after the claim, give back each limited queue's tokens for the jobs it did
-- not claim, take each rate-limited tenant's tokens for its jobs claimed, and, when nothing was
-- claimed, return how long the limits hold the caller back: the soonest token promised to it
-- (queue-wide or a tenant's), else -1 when a queue-wide concurrency limit is full, else null.
-- pgq.limit_finish: its definition is sql/functions/limit_finish.sql (applied after the migrations).
