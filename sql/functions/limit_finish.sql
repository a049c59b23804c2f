-- pgq.limit_finish: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0031 before the functions had files of their own.
--
-- The claim's end (pgq.limit_finish, 0013) takes the tenants' tokens for all the jobs it
-- claimed in two statements, instead of one pgq.tenant_spend call per tenant claimed (six
-- statements each: a claim of 100 jobs over 50 tenants ran 300, under the queue's mutex, and
-- cost 1.85 times the claim without limits in scripts/limit_claim_cost.py). The forgetting of
-- full buckets that tenant_spend did in one call of 100 runs once in 100 claims per tenant
-- claimed, as before. Same signature and result: supervisors of the previous release call it
-- from the same claim statement during a rolling upgrade.

CREATE OR REPLACE FUNCTION pgq.limit_finish(p_queues text[], p_allowed integer[],
                                            p_waits float8[], p_tenant_rated text[],
                                            p_claimed_queues text[], p_claimed_tenants text[])
RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    i integer;
    soonest float8;
    slot float8;
    w float8;
    groups integer;
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
    IF coalesce(array_length(p_claimed_queues, 1), 0) > 0 THEN
        IF coalesce(array_length(p_tenant_rated, 1), 0) > 0 THEN
            -- A missing bucket is a full one: made full first, then every bucket spent.
            INSERT INTO pgq.limit_buckets (queue, per, tenant, tokens, refilled_at)
            SELECT DISTINCT c.q, 'tenant', c.t, l.tenant_burst, clock_timestamp()
            FROM unnest(p_claimed_queues, p_claimed_tenants) AS c(q, t)
            JOIN pgq.queue_limits AS l ON l.queue = c.q AND l.tenant_rate IS NOT NULL
            WHERE c.q = ANY(p_tenant_rated)
            ON CONFLICT DO NOTHING;
            WITH clock AS MATERIALIZED (
                SELECT clock_timestamp() AS at
            ),
            spent AS (
                SELECT c.q, c.t, count(*) AS n
                FROM unnest(p_claimed_queues, p_claimed_tenants) AS c(q, t)
                WHERE c.q = ANY(p_tenant_rated)
                GROUP BY c.q, c.t
            )
            UPDATE pgq.limit_buckets AS b
            SET tokens = least(l.tenant_burst::float8,
                               b.tokens + l.tenant_rate
                                   * greatest(0, extract(epoch FROM clock.at - b.refilled_at)))
                         - s.n,
                refilled_at = greatest(clock.at, b.refilled_at)
            FROM spent AS s
            JOIN pgq.queue_limits AS l ON l.queue = s.q AND l.tenant_rate IS NOT NULL
            CROSS JOIN clock
            WHERE b.queue = s.q AND b.per = 'tenant' AND b.tenant = s.t;
            GET DIAGNOSTICS groups = ROW_COUNT;
            -- Now and then forget the full buckets of the other tenants (see tenant_spend).
            IF random() < 0.01 * groups THEN
                DELETE FROM pgq.limit_buckets AS b
                USING pgq.queue_limits AS l
                WHERE l.queue = ANY(p_tenant_rated)
                  AND l.tenant_rate IS NOT NULL
                  AND b.queue = l.queue
                  AND b.per = 'tenant'
                  AND b.refilled_at < clock_timestamp()
                      - make_interval(secs => l.tenant_burst / l.tenant_rate)
                  AND NOT EXISTS (
                      SELECT 1
                      FROM unnest(p_claimed_queues, p_claimed_tenants) AS c(q, t)
                      WHERE c.q = b.queue AND c.t = b.tenant
                  );
            END IF;
        END IF;
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
