-- pgq.order_ended: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0066 (order keys, issue 33).
--
-- Jobs with order keys ended for good: the job of queues[i] and key keys[i] ended completed,
-- discarded or cancelled, and followers[i] says whether it was still waiting (a follower
-- cancelled) rather than its key's head. Called by every statement that ends jobs (the claim's
-- completions, settle, requeue, rescue, cancel, resolve), only when one of its jobs has a key;
-- a retry, a snooze or 'unknown' is not an ending: the head keeps its key.
--
-- Per key, under its row's lock (taken in (queue, key) order, one order for every caller, so two
-- endings do not deadlock on them): the count goes down by the jobs that ended; when none is
-- left the row goes; when the head ended, the key's next follower (the lowest id waiting, by
-- jobs_order_waiting) is released, due now (or at its own run_at, if later than the clock) so
-- that the claim's cursors, which resume past the last key they claimed, see it. Returns how many
-- followers it released.

CREATE OR REPLACE FUNCTION pgq.order_ended(queues text[], keys text[], followers boolean[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    e         record;
    left_     integer;
    next_id   bigint;
    next_q    text;
    next_due  timestamptz;
    released  integer := 0;
    woken     text[] := '{}';
    later     boolean := false;
BEGIN
    FOR e IN
        SELECT x.queue, x.key, count(*)::integer AS n, bool_or(NOT x.follower) AS head_ended
        FROM unnest(queues, keys, followers) AS x(queue, key, follower)
        WHERE x.key IS NOT NULL
        GROUP BY x.queue, x.key
        ORDER BY x.queue COLLATE "C", x.key COLLATE "C"
    LOOP
        SELECT o.unfinished - e.n INTO left_
        FROM pgq.order_keys AS o
        WHERE o.queue = e.queue
          AND o.key = e.key
        FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        next_id := NULL;
        IF left_ > 0 AND e.head_ended THEN
            -- Due by the clock, not by now(): a follower enqueued while this transaction waited
            -- for the key's row has a run_at after this transaction's start, and would wait
            -- for a stager as 'scheduled' though due. One due later than the clock (its own
            -- delay or run_at) waits for it.
            UPDATE pgq.jobs AS j
            SET state = CASE WHEN j.run_at > clock_timestamp() THEN 'scheduled'
                             ELSE 'available' END,
                run_at = CASE WHEN j.run_at > clock_timestamp() THEN j.run_at ELSE now() END
            WHERE j.id = (SELECT w.id
                          FROM pgq.jobs AS w
                          WHERE w.state = 'waiting'
                            AND w.queue = e.queue
                            AND w.order_key = e.key
                          ORDER BY w.id
                          LIMIT 1)
              AND j.state = 'waiting'
            RETURNING j.id, j.queue, j.run_at INTO next_id, next_q, next_due;
        END IF;
        IF left_ <= 0 OR (e.head_ended AND next_id IS NULL) THEN
            -- Nothing left; or, the count said followers but none waits (their rows were
            -- deleted by hand): the key is free, not held for ever by a count that is wrong.
            DELETE FROM pgq.order_keys AS o WHERE o.queue = e.queue AND o.key = e.key;
        ELSE
            UPDATE pgq.order_keys AS o
            SET unfinished = left_,
                head_id = coalesce(next_id, o.head_id)
            WHERE o.queue = e.queue
              AND o.key = e.key;
        END IF;
        IF next_id IS NOT NULL THEN
            released := released + 1;
            IF next_due > now() THEN
                later := later OR pgq.wakes_stagers(next_due);
            ELSIF NOT next_q = ANY(woken) THEN
                woken := woken || next_q;
            END IF;
        END IF;
    END LOOP;
    -- As enqueue: a queue is woken when some supervisor asked to be (0021); a follower due
    -- later wakes the stagers when due before their next look (0036).
    PERFORM pgq.take_wakeups(q)
    FROM unnest(woken) AS q;
    IF later THEN
        PERFORM pg_notify('pgq_scheduled', '');
    END IF;
    RETURN released;
END;
$$;
