-- pgq.tenant_wait: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0030 before the functions had files of their own.
--
-- Seconds until the token noted by this claim's walk (tenant_room above) is due, promising it
-- to this claim; null when no tenant was held back by its rate (nothing to wait for but a slot
-- or new work). 0 when it came due meanwhile.

CREATE OR REPLACE FUNCTION pgq.tenant_wait(p_queue text)
RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    note text := nullif(current_setting(pgq.tenant_note_name(p_queue), true), '');
    due timestamptz;
BEGIN
    IF note IS NULL THEN
        RETURN NULL;
    END IF;
    due := to_timestamp(split_part(note, ' ', 1)::float8);
    UPDATE pgq.limit_buckets
    SET promised_at = due
    WHERE queue = p_queue AND per = 'tenant' AND tenant = substr(note, strpos(note, ' ') + 1);
    -- The queue's last promise (see tenant_room), when the queue has no rate of its own. Its row
    -- is the queue's mutex, which this claim holds (pgq.limit_take).
    UPDATE pgq.limit_buckets AS q
    SET promised_at = greatest(q.promised_at, due)
    FROM pgq.queue_limits AS l
    WHERE l.queue = p_queue AND l.rate IS NULL
      AND q.queue = p_queue AND q.per = 'queue' AND q.tenant = '';
    -- Promised once: a second call in this transaction finds nothing to wait for.
    PERFORM set_config(pgq.tenant_note_name(p_queue), '', true);
    RETURN greatest(0.0, extract(epoch FROM due - clock_timestamp()));
END
$$;
