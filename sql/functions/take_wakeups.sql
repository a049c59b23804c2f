-- pgq.take_wakeups: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0021 before the functions had files of their own.
--
-- Takes every raised flag of the queue that no other transaction holds (SKIP LOCKED: never
-- waits) and, when it took one, NOTIFYs pgq_jobs with the queue, delivered at commit. Returns
-- whether it notified. The enqueues call it only after an index probe found a raised flag, so
-- the common case (flags down: children busy, or none listening) costs that probe alone, not an
-- UPDATE. PL/pgSQL, so its plans are kept for the session.

CREATE OR REPLACE FUNCTION pgq.take_wakeups(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE pgq.queue_wakeups AS w
    SET wanted = false
    WHERE (w.queue, w.supervisor_id) IN (
        SELECT f.queue, f.supervisor_id
        FROM pgq.queue_wakeups AS f
        WHERE f.queue = take_wakeups.queue
          AND f.wanted
        FOR UPDATE SKIP LOCKED
    );
    IF FOUND THEN
        PERFORM pg_notify('pgq_jobs', take_wakeups.queue);
    END IF;
    RETURN FOUND;
END;
$$;
