-- pgq.limit_take: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0013 before the functions had files of their own.
--
-- How many of p_want jobs of p_queue may start now, taking that many tokens. p_finishing
-- (ids) / p_finishing_leases: running jobs this same statement completes, whose slots are
-- free. A queue without a row in pgq.queue_limits allows everything. When none may start,
-- wait says in how many seconds a token is due (null: a concurrency slot must free first,
-- and only a finishing job can tell).

CREATE OR REPLACE FUNCTION pgq.limit_take(p_queue text, p_want integer, p_finishing bigint[],
                               p_finishing_leases bigint[], OUT allowed integer,
                               OUT wait float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
    running integer;
    taken integer;
BEGIN
    allowed := greatest(p_want, 0);
    SELECT * INTO l FROM pgq.queue_limits WHERE queue = p_queue;
    IF NOT FOUND OR allowed = 0 THEN
        RETURN;
    END IF;
    -- The queue's mutex for the rest of this transaction (see the header).
    PERFORM pgq.limit_bucket(p_queue, 'queue', '', coalesce(l.rate, 1), coalesce(l.burst, 1));
    IF l.concurrency IS NOT NULL THEN
        SELECT count(*) INTO running
        FROM pgq.jobs AS j
        WHERE j.state = 'running'
          AND j.queue = p_queue
          AND NOT EXISTS (
              SELECT 1
              FROM unnest(p_finishing, p_finishing_leases) AS f(id, lease_id)
              WHERE f.id = j.id AND f.lease_id = j.lease_id
          );
        allowed := greatest(0, least(allowed, l.concurrency - running));
        IF allowed = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF l.rate IS NOT NULL THEN
        SELECT t.taken, t.wait INTO taken, wait
        FROM pgq.limit_take_tokens(p_queue, 'queue', '', l.rate, allowed) AS t;
        allowed := taken;
    END IF;
END
$$;
