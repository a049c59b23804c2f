-- pgq.limit_return: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0013 before the functions had files of their own.
--
-- Gives back tokens taken by limit_take that the claim did not use (fewer jobs were due, or
-- other claims held them): a token counts only for a job that started.

CREATE OR REPLACE FUNCTION pgq.limit_return(p_queue text, p_unused integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_unused > 0 THEN
        UPDATE pgq.limit_buckets AS b
        SET tokens = least(l.burst::float8, b.tokens + p_unused)
        FROM pgq.queue_limits AS l
        WHERE l.queue = p_queue
          AND l.rate IS NOT NULL
          AND b.queue = p_queue AND b.per = 'queue' AND b.tenant = '';
    END IF;
    RETURN greatest(p_unused, 0);
END
$$;
