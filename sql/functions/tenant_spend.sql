-- pgq.tenant_spend: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0013 before the functions had files of their own.
--
-- Takes p_count tokens from the tenant's bucket for jobs a claim took (nothing for a queue
-- without a per-tenant rate). Now and then (one call in a hundred) it also forgets the queue's
-- tenant buckets that have refilled completely: a missing bucket is a full one, so the table
-- keeps only the tenants that claimed lately, however many tenants come and go.

CREATE OR REPLACE FUNCTION pgq.tenant_spend(p_queue text, p_tenant text, p_count integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
BEGIN
    SELECT * INTO l FROM pgq.queue_limits WHERE queue = p_queue;
    IF NOT FOUND OR l.tenant_rate IS NULL OR p_count <= 0 THEN
        RETURN 0;
    END IF;
    IF random() < 0.01 THEN
        DELETE FROM pgq.limit_buckets
        WHERE queue = p_queue
          AND per = 'tenant'
          AND tenant <> p_tenant
          AND refilled_at < clock_timestamp()
              - make_interval(secs => l.tenant_burst / l.tenant_rate);
    END IF;
    PERFORM pgq.limit_bucket(p_queue, 'tenant', p_tenant, l.tenant_rate, l.tenant_burst);
    UPDATE pgq.limit_buckets
    SET tokens = tokens - p_count
    WHERE queue = p_queue AND per = 'tenant' AND tenant = p_tenant;
    RETURN p_count;
END
$$;
