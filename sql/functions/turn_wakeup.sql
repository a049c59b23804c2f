-- pgq.turn_wakeup: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- Turns the queue's wake-up flag to `up` and returns true, or returns false when it is
-- already so (a queue without a row is down) or another transaction holds its current row.
-- The one step of pgq.take_wakeups (up = false) and pgq.want_wakeups (up = true).
--
-- A flag is the newest row of its queue in pgq.wakeup_flags (0071): turning it deletes the
-- current row and inserts one with the other state, so the current row stays the last entry
-- of the queue's range in the primary key, and every look reads it first, whatever a held xmin
-- horizon keeps behind it. The current row is locked SKIP LOCKED: an enqueue taking the flag
-- never waits for another enqueue or a master, and one that locks it after the other committed
-- finds it deleted, so a queue keeps one current row. A flag already in the asked state is not
-- even locked, so a raise never makes a take skip a raised flag. PL/pgSQL, so its plans are
-- kept for the session (under the caller's settings: want_wakeups fixes them generic).

CREATE OR REPLACE FUNCTION pgq.turn_wakeup(queue text, up boolean)
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
    WHERE f.queue = turn_wakeup.queue
    ORDER BY f.seq DESC
    LIMIT 1;
    IF coalesce(current_up, false) = turn_wakeup.up THEN
        RETURN false;
    END IF;
    IF current_seq IS NOT NULL THEN
        DELETE FROM pgq.wakeup_flags AS f
        WHERE f.queue = turn_wakeup.queue
          AND f.seq = (SELECT h.seq
                       FROM pgq.wakeup_flags AS h
                       WHERE h.queue = turn_wakeup.queue
                         AND h.seq = current_seq
                       FOR UPDATE SKIP LOCKED);
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    INSERT INTO pgq.wakeup_flags (queue, up) VALUES (turn_wakeup.queue, turn_wakeup.up);
    RETURN true;
END;
$$;
