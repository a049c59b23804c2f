-- pgq.limit_take_all: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0030 before the functions had files of their own.
--
-- 0013's, clearing each limited queue's note first: a claim starts with none, even when an
-- earlier claim ran in the same transaction.

CREATE OR REPLACE FUNCTION pgq.limit_take_all(p_queues text[], p_want integer,
                                              p_finishing bigint[],
                                              p_finishing_leases bigint[])
RETURNS TABLE (queue text, allowed integer, wait float8, per_tenant boolean,
               tenant_rated boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
BEGIN
    IF p_want <= 0 THEN
        RETURN;
    END IF;
    FOR l IN
        SELECT ql.*
        FROM pgq.queue_limits AS ql
        WHERE ql.queue = ANY(p_queues)
        ORDER BY ql.queue COLLATE "C"
    LOOP
        queue := l.queue;
        SELECT t.allowed, t.wait INTO allowed, wait
        FROM pgq.limit_take(l.queue, p_want, p_finishing, p_finishing_leases) AS t;
        per_tenant := l.tenant_concurrency IS NOT NULL OR l.tenant_rate IS NOT NULL;
        tenant_rated := l.tenant_rate IS NOT NULL;
        IF tenant_rated THEN
            PERFORM set_config(pgq.tenant_note_name(l.queue), '', true);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
