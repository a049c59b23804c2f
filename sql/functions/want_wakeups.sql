-- pgq.want_wakeups: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- A master raises the wake-up flags of `queues`: it has a child asleep for them. A flag is the
-- newest row of its queue in pgq.wakeup_flags (0071); pgq.turn_wakeup raises it. A flag already
-- up is left alone (not even locked, so an enqueue taking it never skips it because of us); a
-- queue without a row gets its first. A lowered row another master is replacing right now is
-- skipped: that master raises it. Returns the queues whose flag went up: the master watches
-- each for a claim of the queue (supervisor/master/wakeups.py), which finds any job committed
-- while the flag was down. The flags are hints (a lost one is written again within a second),
-- so the commit does not wait for the WAL flush: the master's loop waits on it
-- (transaction-local, so it outlives the call).
-- `supervisor_id` is no longer used (a flag is the queue's, not a master's since 0071); it stays
-- for the masters of earlier releases, which call this function with it.
--
-- It reads no job. `waiting` is always null, kept for the masters of the releases from
-- 2026-12-03 (they read it as false): it said whether a job of the queue waited, from a probe
-- of the head of jobs_claim, which while an xmin horizon is held walks every dead entry the
-- hold keeps there. Made at every raise, on the master's loop, it grew to tens of
-- milliseconds within minutes of a hold at 3,000 jobs/s, and the wake-ups waited behind it:
-- pickup p50 5.8, 13.8, 21.6 ms in the hold's first three minutes against 3.0, 3.4, 3.9 ms
-- without it (scripts/benchmarks/steady_latency.py, issue 36).
--
-- A function with its plans fixed for the session: sent as a statement, PostgreSQL planned it
-- afresh at every raise (its generic plan's estimate looked dearer than the custom ones), 0.48
-- of its 0.6 ms on the server, a raise for every job an idle child picks up (issue 29). The
-- generic plans are made once, perhaps while the flags table is empty, so sequential and
-- bitmap scans are priced out as in the child's session (supervisor/queue/jobs.py,
-- generic_plans).

CREATE OR REPLACE FUNCTION pgq.want_wakeups(supervisor_id text, queues text[])
RETURNS TABLE (queue text, waiting boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    q text;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    FOREACH q IN ARRAY want_wakeups.queues LOOP
        CONTINUE WHEN NOT pgq.turn_wakeup(q, true);
        queue := q;
        waiting := NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
