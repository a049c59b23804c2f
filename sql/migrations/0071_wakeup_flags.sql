-- The wake-up flags (0021) written as new rows, read newest first (issue 36).
--
-- pgq.queue_wakeups kept one row per (queue, supervisor) and every take and raise updated it in
-- place: about 130 updates a second at 3,000 jobs/s. While an xmin horizon is held, every one of
-- those versions stays, and the enqueue's look at the flag, pgq.take_wakeups and the master's
-- raise each walked them all: 0.2 ms at the start of a hold at 3,000 jobs/s, 0.9 ms after
-- 5 minutes, 3.5 ms (608 buffers) after 12 (scripts/benchmarks/steady_latency.py).
--
-- Here a flag is one live row per queue in pgq.wakeup_flags, and each change writes a new row
-- and deletes the one it replaces: a take deletes the raised row it locked and inserts a lowered
-- one; a raise deletes the lowered row and inserts a raised one. seq only grows, so the current
-- row of a queue is the last entry of its range in the primary key, and every look reads it
-- newest first (ORDER BY seq DESC LIMIT 1): it stops at the first visible entry, and the
-- versions a held horizon keeps are all behind it. What it costs no longer grows with the hold
-- (0.03 ms, 3 buffers, throughout 5 minutes in the same benchmark).
--
-- One flag per queue, no longer one per supervisor: every master serving a queue hears the one
-- NOTIFY a take sends (pgq_jobs carries the queue, not the supervisor), and the masters that
-- still have a child asleep raise it again.
CREATE TABLE pgq.wakeup_flags (
    queue  text     NOT NULL,
    seq    bigint   GENERATED ALWAYS AS IDENTITY,
    up     boolean  NOT NULL,
    PRIMARY KEY (queue, seq)
);

INSERT INTO pgq.wakeup_flags (queue, up)
SELECT DISTINCT queue, true
FROM pgq.queue_wakeups
WHERE wanted
ORDER BY queue;

-- Every enqueue reads the flags: a role that could use the old table (pgq_worker, through
-- sql/roles/worker_role.sql) gets the same rights on the new one, and on the view below, at
-- once, not when someone runs the role script again (granted at the end).
CREATE TEMPORARY TABLE wakeup_grants ON COMMIT DROP AS
SELECT a.grantee, string_agg(a.privilege_type, ', ') AS privileges
FROM pg_class AS c
CROSS JOIN LATERAL aclexplode(c.relacl) AS a
WHERE c.oid = 'pgq.queue_wakeups'::regclass
  AND a.grantee <> c.relowner
  AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
GROUP BY a.grantee;

-- The producers and masters of releases before this one still name pgq.queue_wakeups until
-- they are upgraded: their enqueues look there for a raised flag (then call pgq.take_wakeups,
-- which is this release's), and their masters delete their rows when they stop, reload or prune
-- a dead supervisor. The view shows each queue's current row, and the rule keeps the deletes
-- from doing anything (a flag is no supervisor's now; one left up with nobody asleep costs one
-- NOTIFY, then stays down). A rule, not a trigger: no function to keep, and it holds in the
-- WITH their masters delete in. Their look reads the newest row first as ours does, but a
-- lowered flag does not stop it: it goes on through every row of the queue a held horizon
-- keeps, as the old table's versions did; theirs until they are upgraded. The view goes in a
-- later release, once no client from before this one is left.
DROP TABLE pgq.queue_wakeups;

CREATE VIEW pgq.queue_wakeups AS
SELECT DISTINCT ON (f.queue) f.queue, ''::text AS supervisor_id, f.up AS wanted
FROM pgq.wakeup_flags AS f
ORDER BY f.queue, f.seq DESC;

CREATE RULE queue_wakeups_kept AS ON DELETE TO pgq.queue_wakeups
DO INSTEAD DELETE FROM pgq.wakeup_flags WHERE false;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM wakeup_grants LOOP
        EXECUTE format('GRANT %s ON pgq.wakeup_flags, pgq.queue_wakeups TO %s', g.privileges,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;
