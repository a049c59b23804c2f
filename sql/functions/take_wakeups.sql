-- pgq.take_wakeups: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- Takes the queue's wake-up flag if it is up and no other transaction holds it (SKIP LOCKED:
-- never waits), and then NOTIFYs pgq_jobs with the queue, delivered at commit. Returns whether
-- it notified. The enqueues call it only after their own look found the flag up, so the common
-- case (the flag down: children busy, or none listening) costs that look alone.
--
-- A flag is the newest row of its queue in pgq.wakeup_flags (0071): taking it deletes the
-- raised row and inserts a lowered one, so the current row stays the last entry of the queue's
-- range in the primary key, and every look reads it first, whatever a held xmin horizon keeps
-- behind it. Two enqueues that both saw it up: one locks it, the other skips it; one that locks
-- it after the first committed finds it deleted. PL/pgSQL, so its plans are kept for the
-- session.

CREATE OR REPLACE FUNCTION pgq.take_wakeups(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    current_seq bigint;
    current_up  boolean;
BEGIN
    SELECT f.seq, f.up INTO current_seq, current_up
    FROM pgq.wakeup_flags AS f
    WHERE f.queue = take_wakeups.queue
    ORDER BY f.seq DESC
    LIMIT 1;
    IF NOT coalesce(current_up, false) THEN
        RETURN false;
    END IF;
    DELETE FROM pgq.wakeup_flags AS f
    WHERE f.queue = take_wakeups.queue
      AND f.seq = (SELECT h.seq
                   FROM pgq.wakeup_flags AS h
                   WHERE h.queue = take_wakeups.queue
                     AND h.seq = current_seq
                   FOR UPDATE SKIP LOCKED);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgq.wakeup_flags (queue, up) VALUES (take_wakeups.queue, false);
    PERFORM pg_notify('pgq_jobs', take_wakeups.queue);
    RETURN true;
END;
$$;
