-- pgq.order_rejoin: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0066 (order keys, issue 33); joins through pgq.order_join since 0068.
--
-- Jobs job_ids with order keys were replayed (dead letters back to 'available'): each joins its
-- key again, as an enqueue does (pgq.order_join). A key with no unfinished job takes it as its
-- head (it stays available); otherwise it waits ('waiting') behind the key's head, and goes in id
-- order, so in the order it was first enqueued, among the followers. Returns how many of them
-- wait.

CREATE OR REPLACE FUNCTION pgq.order_rejoin(job_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    followers  bigint[];
BEGIN
    SELECT pgq.order_join(array_agg(j.queue), array_agg(j.order_key), array_agg(j.id))
    INTO followers
    FROM pgq.jobs AS j
    WHERE j.id = ANY(job_ids)
      AND j.order_key IS NOT NULL;
    IF cardinality(followers) > 0 THEN
        UPDATE pgq.jobs SET state = 'waiting' WHERE id = ANY(followers);
    END IF;
    RETURN coalesce(cardinality(followers), 0);
END;
$$;
