-- pgq.limit_take_tokens: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0013 before the functions had files of their own.
--
-- Takes up to p_want tokens from a bucket already refilled by limit_bucket in this
-- transaction; returns how many it took and, when it took none, the seconds until this caller
-- should try again (the next token nobody else was promised).

CREATE OR REPLACE FUNCTION pgq.limit_take_tokens(p_queue text, p_per text, p_tenant text, p_rate float8,
                                      p_want integer, OUT taken integer, OUT wait float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b pgq.limit_buckets%ROWTYPE;
    promise timestamptz;
BEGIN
    SELECT * INTO b FROM pgq.limit_buckets
    WHERE queue = p_queue AND per = p_per AND tenant = p_tenant;
    taken := least(p_want, floor(b.tokens)::integer);
    IF taken > 0 THEN
        UPDATE pgq.limit_buckets
        SET tokens = tokens - taken
        WHERE queue = p_queue AND per = p_per AND tenant = p_tenant;
        RETURN;
    END IF;
    taken := 0;
    -- When the next token is due; a caller already promised that one (a promise still ahead
    -- of now) gets the token after the last promised, so promises stay on token due times.
    promise := b.refilled_at + make_interval(secs => (1.0 - b.tokens) / p_rate);
    IF b.promised_at > b.refilled_at THEN
        promise := greatest(promise, b.promised_at + make_interval(secs => 1.0 / p_rate));
    END IF;
    UPDATE pgq.limit_buckets
    SET promised_at = promise
    WHERE queue = p_queue AND per = p_per AND tenant = p_tenant;
    wait := greatest(0.0, extract(epoch FROM promise - b.refilled_at));
END
$$;
