-- pgq.order_rejoin: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0066 (order keys, issue 33).
--
-- Jobs job_ids with order keys were replayed (dead letters back to 'available'): each joins its
-- key again, as an enqueue does. A key with no unfinished job takes it as its head (it stays
-- available); otherwise it waits ('waiting') behind the key's head, and goes in id order, so in
-- the order it was first enqueued, among the followers. Keys are locked in (queue, key) order,
-- as pgq.order_ended takes them. Returns how many of them wait.

CREATE OR REPLACE FUNCTION pgq.order_rejoin(job_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r        record;
    follows  boolean;
    waiting  integer := 0;
BEGIN
    FOR r IN
        SELECT j.id, j.queue, j.order_key
        FROM pgq.jobs AS j
        WHERE j.id = ANY(job_ids)
          AND j.order_key IS NOT NULL
        ORDER BY j.queue COLLATE "C", j.order_key COLLATE "C", j.id
    LOOP
        INSERT INTO pgq.order_keys AS o (queue, key, unfinished, head_id)
        VALUES (r.queue, r.order_key, 1, r.id)
        ON CONFLICT (queue, key) DO UPDATE SET unfinished = o.unfinished + 1
        RETURNING o.unfinished > 1 INTO follows;
        IF follows THEN
            UPDATE pgq.jobs SET state = 'waiting' WHERE id = r.id;
            waiting := waiting + 1;
        END IF;
    END LOOP;
    RETURN waiting;
END;
$$;
