-- pgq.order_unjoin: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0066 (order keys, issue 33).
--
-- Gives back the count pgq.enqueue took on key k of queue q for a job it then did not insert
-- (its unique key was held, or its debounce replaced the key's waiting head): nothing ended, so
-- nothing is released. The caller holds the key's row lock already (it took the count).

CREATE OR REPLACE FUNCTION pgq.order_unjoin(q text, k text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM pgq.order_keys AS o
    WHERE o.queue = q
      AND o.key = k
      AND o.unfinished = 1;
    IF NOT FOUND THEN
        UPDATE pgq.order_keys AS o
        SET unfinished = o.unfinished - 1
        WHERE o.queue = q
          AND o.key = k;
    END IF;
END;
$$;
