-- A job due later wakes the stagers only when it is due soon (production shapes, after issue 20).
-- Every enqueue of a job for later sent NOTIFY pgq_scheduled, and NOTIFY takes a database-wide
-- lock at commit (0021): 16 producers of delayed jobs reached 0.26-0.42 of a plain INSERT, the
-- wall 0021 took down for jobs due now. A stager looks at the earliest run_at at least once a
-- second whatever it hears (supervisor/services/stager.py, LOOK_EVERY), so the NOTIFY only
-- matters for a job due before the stager's next look: one due within 10 seconds notifies as
-- before; one due later is found by a look, in time, unless the transaction that enqueued it
-- is still open a second before its run_at (then it is seen within a second of the commit).
--
-- pgq.wakes_stagers is the one rule, read by the enqueue statements (sql/queries.sql) and by
-- pgq.enqueue, which is 0024's with that test around its NOTIFY (same signature, so CREATE OR
-- REPLACE: callers and grants are kept). A supervisor of the previous release notifies for
-- every job for later, as before.

-- pgq.wakes_stagers: its definition is sql/functions/wakes_stagers.sql (applied after the migrations).

-- pgq.enqueue: its definition is sql/functions/enqueue.sql (applied after the migrations).
