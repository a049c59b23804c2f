-- pgq.take_wakeups: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- Takes the queue's wake-up flag if it is up and no other transaction holds it (SKIP LOCKED:
-- never waits), and then NOTIFYs pgq_jobs with the queue, delivered at commit. Returns whether
-- it notified. The enqueues call it only after their own look found the flag up, so the common
-- case (the flag down: children busy, or none listening) costs that look alone.
--
-- A flag is the newest row of its queue in pgq.wakeup_flags (0071); pgq.turn_wakeup lowers it
-- (locking the raised row SKIP LOCKED: two enqueues that both saw it up, one takes it, the
-- other skips it). PL/pgSQL, so its plans are kept for the session.

CREATE OR REPLACE FUNCTION pgq.take_wakeups(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pgq.turn_wakeup(take_wakeups.queue, false) THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgq_jobs', take_wakeups.queue);
    RETURN true;
END;
$$;
