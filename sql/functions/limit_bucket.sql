-- pgq.limit_bucket: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0013 before the functions had files of their own.
--
-- Locks (creating it full if missing) and refills one bucket; returns its tokens now.

CREATE OR REPLACE FUNCTION pgq.limit_bucket(p_queue text, p_per text, p_tenant text, p_rate float8,
                                 p_burst integer)
RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b pgq.limit_buckets%ROWTYPE;
    at timestamptz := clock_timestamp();
BEGIN
    INSERT INTO pgq.limit_buckets (queue, per, tenant, tokens, refilled_at)
    VALUES (p_queue, p_per, p_tenant, p_burst, at)
    ON CONFLICT DO NOTHING;
    SELECT * INTO b FROM pgq.limit_buckets
    WHERE queue = p_queue AND per = p_per AND tenant = p_tenant
    FOR UPDATE;
    -- The clock after the lock wait: tokens that arrived while waiting count.
    at := greatest(clock_timestamp(), b.refilled_at);
    b.tokens := least(p_burst::float8,
                      b.tokens + p_rate * extract(epoch FROM at - b.refilled_at));
    UPDATE pgq.limit_buckets
    SET tokens = b.tokens,
        refilled_at = at
    WHERE queue = p_queue AND per = p_per AND tenant = p_tenant;
    RETURN b.tokens;
END
$$;
