-- pgq.order_join: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added with migration 0068 (order keys on steps and `then` jobs, issue 33).
--
-- Jobs ids[i] (already numbered, written or about to be) join key keys[i] of queue queues[i], as
-- an enqueue joins: each counts one more unfinished job in pgq.order_keys; a key with none
-- unfinished takes it as its head, otherwise it follows. Keys are locked in (queue, key) order,
-- as pgq.order_ended takes them, and a key's jobs join in id order. Returns the ids that follow
-- (the caller writes them 'waiting'), empty when none does. Used by a replay (pgq.order_rejoin),
-- a step's release (pgq.workflow_ended) and a batch's `then` job (pgq.batch_finish).

CREATE OR REPLACE FUNCTION pgq.order_join(queues text[], keys text[], ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r          record;
    follows    boolean;
    followers  bigint[] := '{}';
BEGIN
    FOR r IN
        SELECT x.queue, x.key, x.id
        FROM unnest(queues, keys, ids) AS x(queue, key, id)
        WHERE x.key IS NOT NULL
        ORDER BY x.queue COLLATE "C", x.key COLLATE "C", x.id
    LOOP
        INSERT INTO pgq.order_keys AS o (queue, key, unfinished, head_id)
        VALUES (r.queue, r.key, 1, r.id)
        ON CONFLICT (queue, key) DO UPDATE SET unfinished = o.unfinished + 1
        RETURNING o.unfinished > 1 INTO follows;
        IF follows THEN
            followers := followers || r.id;
        END IF;
    END LOOP;
    RETURN followers;
END;
$$;
