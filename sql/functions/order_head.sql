-- pgq.order_head: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0066 (order keys, issue 33).
--
-- Names job j the head of key k of queue q: pgq.enqueue, once the first job of a key has its
-- id (the key's row was written before the insert, under whose lock this runs).

CREATE OR REPLACE FUNCTION pgq.order_head(q text, k text, j bigint)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE pgq.order_keys AS o
    SET head_id = j
    WHERE o.queue = q
      AND o.key = k;
$$;
