-- Lease renewal, the cancel watch and the rescuer by paths that a held xmin horizon does not
-- lengthen (issue 30, item 5). While any snapshot older than them is open, the entries of every
-- job that ran and finished stay in the partial indexes on running jobs (jobs_lease,
-- jobs_running, and each worker's share of them): 1.8 million after ten minutes at 3,000 jobs/s.
-- A statement that reads "every running job of these workers" or "every running job whose lease
-- expired" visits each of those entries and its heap tuple, and ran into the master's 1 s
-- statement timeout. So these read what they need by key: the renewal and the cancel watch the
-- jobs the children say they hold, through the primary key (a job's own versions only); the
-- rescuer one window of lease expiries at a time, from where the last window stopped (the
-- entries in a window are those of the jobs claimed in one stretch of time, however long the
-- horizon has been held).

-- name: by_key_plan
-- Before each statement of this file, in its transaction: no sequential and no bitmap scans, no
-- JIT, and the statement's generic plan. While a horizon is held, the statistics see the few
-- live rows, not the dead versions the pages and indexes hold: measured with 2 live rows among
-- 800,000 dead, the planner read 300 ids by a sequential scan of 20,000 pages (119 ms; seconds
-- after ten minutes at 3,000 jobs/s), and a 10 ms window of expiries by a bitmap of every entry
-- of jobs_running (294 ms), where the primary key and the range on jobs_lease take a
-- millisecond. The costs those settings leave on other paths then set off JIT (880 ms), and a
-- custom plan's look at the range's ends walks dead entries while planning (53 ms): the
-- generic plan, made once per session, needs neither. Transaction-local: nothing stays on the
-- session (or on a pooler's server connection).
SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('jit', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: renew_held_leases
-- Extends the leases of the claimed jobs (ids[i], lease_ids[i]) that this host's children hold,
-- fenced on (id, lease_id) like renew_leases; returns the ids renewed. A row someone holds (an
-- operator's open transaction, the child writing its outcome) is skipped this turn rather than
-- waited for: waiting, the whole host's renewal ran into the master's lock timeout for as long
-- as one row was held. A lease with more than %(fresh_for)s seconds left (claimed or renewed
-- since the last turn: most of a busy host's claims, which finish in milliseconds) is left as it
-- is: it lasts past the next turn, and rewriting it only adds row versions. Written back
-- through the locked rows' tuple ids (see rescue_window).
WITH held AS (
    SELECT j.ctid AS tid
    FROM pgq.jobs AS j
    JOIN unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS f(id, lease_id)
      ON f.id = j.id
     AND f.lease_id = j.lease_id
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.lease_until < now() + make_interval(secs => %(fresh_for)s::float8)
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE pgq.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease_seconds)s::float8)
FROM held
WHERE j.ctid = held.tid
RETURNING j.id;

-- name: held_cancel_requests
-- Of the claimed jobs (ids[i], lease_ids[i]) this host's children hold, those someone asked to
-- cancel, still held by that claim (the cancel watch; by primary key, as renew_held_leases).
-- No condition on state (a matching lease id means running: jobs_fenced_iff_running), which
-- would let the planner pick a partial index on running jobs, full of what the hold keeps.
SELECT j.id, j.locked_by, j.kind, j.queue
FROM pgq.jobs AS j
JOIN unnest(%(ids)s::bigint[], %(lease_ids)s::bigint[]) AS f(id, lease_id)
  ON f.id = j.id
 AND f.lease_id = j.lease_id
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.cancel_requested_at IS NOT NULL;

-- name: rescue_scanned_through
-- Where the rescuer's windows stopped: every lease that expired before this was looked at by a
-- rescue run (null before the first windowed run).
SELECT scanned_through
FROM pgq.maintenance
WHERE task = 'rescue';

-- name: earliest_running_lease
-- Where the first windowed rescue starts: the earliest lease of a running job (this walks
-- whatever a held horizon keeps before it, once, on the first run after the upgrade).
SELECT min(lease_until)
FROM pgq.jobs
WHERE state = 'running';

-- name: rescue_scanned
-- Records that the rescue run started at %(started_at)s by %(run_by)s has looked at every lease
-- that expired before %(through)s (in the transaction of the window that got there). Only while
-- that run is the latest, like its windows; a later run's mark is never moved back.
UPDATE pgq.maintenance
SET scanned_through = %(through)s
WHERE task = 'rescue'
  AND run_by = %(run_by)s
  AND last_run_at = %(started_at)s
  AND (scanned_through IS NULL OR scanned_through < %(through)s);

-- name: rescue_window
-- The rescue of the jobs whose lease expired in [%(since)s, %(until)s) (and before now), at most
-- %(limit)s, in expiry order, with each one's expiry (a full window goes on from the last).
-- Otherwise the rescue statement in sql/queries.sql: returned to available, or discarded with
-- no attempts left, cancelled with a cancel request, unknown for a kind with external effects.
-- The range on lease_until bounds the walk of jobs_lease to the entries of that window.
WITH target AS (
    SELECT ctid AS tid, id, lease_until, kind, attempts, max_attempts, locked_by
    FROM pgq.jobs
    WHERE state = 'running'
      AND lease_until >= %(since)s::timestamptz
      AND lease_until < least(%(until)s::timestamptz, now())
    ORDER BY lease_until
    LIMIT %(limit)s::integer
    FOR UPDATE SKIP LOCKED
),
-- Decided from the locked rows themselves, and written back through their tuple ids (the row
-- locks keep them in place): no other read of pgq.jobs, so nothing for the planner to estimate
-- from statistics that see the live rows only. Read through the primary key instead, a table
-- the statistics call nearly empty was read by a full scan of the key, which walks every entry
-- a held horizon keeps, and the join's estimate probed the key's ends while planning.
decided AS (
    SELECT t.tid,
           t.id,
           t.attempts >= coalesce(p.max_attempts, t.max_attempts) AS exhausted,
           x.unknown,
           CASE WHEN x.unknown THEN 'outcome unknown (effects: external): ' ELSE '' END
               || 'lease expired: worker ' || t.locked_by || ' stopped renewing it' AS error
    FROM target AS t
    CROSS JOIN LATERAL (
        SELECT t.kind = ANY(%(external_kinds)s::text[])
               OR EXISTS (SELECT 1
                          FROM pgq.supervisors AS v
                          WHERE t.kind = ANY(v.external_kinds)) AS unknown
    ) AS x
    LEFT JOIN unnest(%(policy_kinds)s::text[], %(policy_max_attempts)s::integer[])
        AS p(kind, max_attempts) ON p.kind = t.kind
),
moved AS (
    UPDATE pgq.jobs AS j
    SET state = CASE
            WHEN d.unknown THEN 'unknown'
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN d.exhausted THEN 'discarded'
            ELSE 'available'
        END,
        run_at = now(),
        last_error = d.error,
        errors = pgq.error_kept(j.errors, j.attempts, d.error),
        lease_id = NULL,
        locked_by = NULL,
        lease_until = NULL,
        finished_at = CASE
            WHEN d.unknown THEN NULL
            WHEN d.exhausted OR j.cancel_requested_at IS NOT NULL THEN now()
        END
    FROM decided AS d
    WHERE j.ctid = d.tid
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id, j.order_key
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM moved
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s::boolean
),
ended AS (
    SELECT pgq.batch_ended(array_agg(id), array_agg(batch_id), array_agg(state))
    FROM moved
    WHERE batch_id IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
),
ordered AS (
    -- Jobs with order keys that ended let their keys' next followers go (pgq.order_ended, 0066).
    SELECT pgq.order_ended(array_agg(queue), array_agg(order_key), array_agg(false))
    FROM moved
    WHERE order_key IS NOT NULL
      AND state IN ('discarded', 'cancelled')
    HAVING count(*) > 0
)
SELECT m.id, m.queue, m.kind, m.state, m.attempts, t.lease_until
FROM moved AS m
JOIN target AS t USING (id)
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o
ORDER BY t.lease_until;

-- name: child_session_timeouts
-- A child's session: a statement that waits on a lock (a carried outcome's row someone holds, a
-- queue's limits mutex) is cut short at the lock timeout, any statement at the statement
-- timeout, and retried (supervisor/child/session.py): without them a 15 s wait behind a row lock
-- held the child's claims for 15 s (issue 30). Session-wide, on a direct session only.
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false);
