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
-- pgq.limit_bucket: its definition from here on is sql/functions/limit_bucket.sql (applied after the migrations).

-- Takes up to p_want tokens from a bucket already refilled by limit_bucket in this
-- transaction; returns how many it took and, when it took none, the seconds until this caller
-- should try again (the next token nobody else was promised).
-- pgq.limit_take_tokens: its definition from here on is sql/functions/limit_take_tokens.sql (applied after the migrations).

-- How many of p_want jobs of p_queue may start now, taking that many tokens. p_finishing
-- (ids) / p_finishing_leases: running jobs this same statement completes, whose slots are
-- free. A queue without a row in pgq.queue_limits allows everything. When none may start,
-- wait says in how many seconds a token is due (null: a concurrency slot must free first,
-- and only a finishing job can tell).
-- pgq.limit_take: its definition from here on is sql/functions/limit_take.sql (applied after the migrations).

-- Gives back tokens taken by limit_take that the claim did not use (fewer jobs were due, or
-- other claims held them): a token counts only for a job that started.
-- pgq.limit_return: its definition from here on is sql/functions/limit_return.sql (applied after the migrations).

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
CREATE FUNCTION pgq.tenant_room(p_queue text, p_tenant text, p_want integer,
                                p_finishing bigint[], p_finishing_leases bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
    b pgq.limit_buckets%ROWTYPE;
    room integer := greatest(p_want, 0);
    running integer;
BEGIN
    SELECT * INTO l FROM pgq.queue_limits WHERE queue = p_queue;
    IF NOT FOUND OR room = 0 THEN
        RETURN room;
    END IF;
    IF l.tenant_concurrency IS NOT NULL THEN
        SELECT count(*) INTO running
        FROM pgq.jobs AS j
        WHERE j.state = 'running'
          AND j.queue = p_queue
          AND coalesce(j.tenant, '') COLLATE "C" = p_tenant
          AND NOT EXISTS (
              SELECT 1
              FROM unnest(p_finishing, p_finishing_leases) AS f(id, lease_id)
              WHERE f.id = j.id AND f.lease_id = j.lease_id
          );
        room := least(room, l.tenant_concurrency - running);
    END IF;
    IF room > 0 AND l.tenant_rate IS NOT NULL THEN
        SELECT * INTO b FROM pgq.limit_buckets
        WHERE queue = p_queue AND per = 'tenant' AND tenant = p_tenant;
        IF FOUND THEN
            room := least(room, floor(least(
                l.tenant_burst::float8,
                b.tokens + l.tenant_rate
                    * greatest(0, extract(epoch FROM clock_timestamp() - b.refilled_at))
            ))::integer);
        ELSE
            room := least(room, l.tenant_burst);
        END IF;
    END IF;
    RETURN greatest(room, 0);
END
$$;

-- Takes p_count tokens from the tenant's bucket for jobs a claim took (nothing for a queue
-- without a per-tenant rate). Now and then (one call in a hundred) it also forgets the queue's
-- tenant buckets that have refilled completely: a missing bucket is a full one, so the table
-- keeps only the tenants that claimed lately, however many tenants come and go.
-- pgq.tenant_spend: its definition from here on is sql/functions/tenant_spend.sql (applied after the migrations).

-- Seconds until the next of the queue's tenants held back by its rate has a token again (null
-- when none is): how long a claim that found nothing it may start can sleep. Only tokens still
-- to come count, so a bucket that refilled meanwhile never makes a caller try again at once.
CREATE FUNCTION pgq.tenant_wait(p_queue text)
RETURNS float8
LANGUAGE sql VOLATILE AS $$
    SELECT min(w.seconds)
    FROM pgq.queue_limits AS l
    JOIN pgq.limit_buckets AS b
        ON b.queue = l.queue AND b.per = 'tenant'
    CROSS JOIN LATERAL (
        SELECT extract(epoch FROM b.refilled_at - clock_timestamp())
               + (1.0 - b.tokens) / l.tenant_rate AS seconds
    ) AS w
    WHERE l.queue = p_queue
      AND l.tenant_rate IS NOT NULL
      AND b.tokens < 1
      AND w.seconds > 0
$$;

-- The claim's two ends in one call each, so the claim statement stays small to plan (it is
-- planned afresh at many runs; every CTE and join it holds costs planning time at each).
--
-- limit_take_all: pgq.limit_take for each of p_queues that has limits, in name order (two
-- claims that meet on two limited queues never wait for each other crosswise), with whether
-- each also limits its tenants.
CREATE FUNCTION pgq.limit_take_all(p_queues text[], p_want integer, p_finishing bigint[],
                                   p_finishing_leases bigint[])
RETURNS TABLE (queue text, allowed integer, wait float8, per_tenant boolean,
               tenant_rated boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
BEGIN
    IF p_want <= 0 THEN
        RETURN;
    END IF;
    FOR l IN
        SELECT ql.*
        FROM pgq.queue_limits AS ql
        WHERE ql.queue = ANY(p_queues)
        ORDER BY ql.queue COLLATE "C"
    LOOP
        queue := l.queue;
        SELECT t.allowed, t.wait INTO allowed, wait
        FROM pgq.limit_take(l.queue, p_want, p_finishing, p_finishing_leases) AS t;
        per_tenant := l.tenant_concurrency IS NOT NULL OR l.tenant_rate IS NOT NULL;
        tenant_rated := l.tenant_rate IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END
$$;

-- limit_finish: after the claim, give back each limited queue's tokens for the jobs it did
-- not claim, take each rate-limited tenant's tokens for its jobs claimed, and, when nothing was
-- claimed, return how long the limits hold the caller back: the soonest token promised to it
-- (queue-wide or a tenant's), else -1 when a queue-wide concurrency limit is full, else null.
CREATE FUNCTION pgq.limit_finish(p_queues text[], p_allowed integer[], p_waits float8[],
                                 p_tenant_rated text[], p_claimed_queues text[],
                                 p_claimed_tenants text[])
RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    i integer;
    g record;
    soonest float8;
    slot float8;
    w float8;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP
        PERFORM pgq.limit_return(
            p_queues[i],
            p_allowed[i] - (SELECT count(*) FROM unnest(p_claimed_queues) AS c(q)
                            WHERE c.q = p_queues[i])::integer);
        IF p_allowed[i] = 0 THEN
            w := coalesce(p_waits[i], -1);
            IF w >= 0 THEN
                soonest := least(soonest, w);
            ELSE
                slot := -1;
            END IF;
        END IF;
    END LOOP;
    FOR g IN
        SELECT c.q, c.t, count(*) AS n
        FROM unnest(p_claimed_queues, p_claimed_tenants) AS c(q, t)
        WHERE c.q = ANY(p_tenant_rated)
        GROUP BY c.q, c.t
    LOOP
        PERFORM pgq.tenant_spend(g.q, g.t, g.n::integer);
    END LOOP;
    IF coalesce(array_length(p_claimed_queues, 1), 0) > 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP
        IF p_queues[i] = ANY(p_tenant_rated) AND p_allowed[i] > 0 THEN
            soonest := least(soonest, pgq.tenant_wait(p_queues[i]));
        END IF;
    END LOOP;
    RETURN coalesce(soonest, slot);
END
$$;
