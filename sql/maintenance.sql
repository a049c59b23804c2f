-- Rescue, purge and vacuum: the master's services that keep the tables small and jobs moving.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: rescue
-- Returns up to %(limit)s jobs whose lease expired (their worker stopped renewing: a host that
-- died, a network partition) to available, or to discarded when no attempts are left.
-- SKIP LOCKED lets it run beside claims and finishes without waiting on them. A job with a
-- cancel request ends 'cancelled'. The expiry is recorded in last_error and appended to errors.
-- A job of a kind with effects outside the database (%(external_kinds)s, or declared by any
-- live supervisor) goes to 'unknown' instead: nobody knows how far its attempt got.
-- Discarded and cancelled members count down their batch.
WITH target AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'running'
      AND lease_until < now()
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
decided AS (
    SELECT j.id,
           j.attempts >= coalesce(p.max_attempts, j.max_attempts) AS exhausted,
           x.unknown,
           CASE WHEN x.unknown THEN 'outcome unknown (effects: external): ' ELSE '' END
               || 'lease expired: worker ' || j.locked_by || ' stopped renewing it' AS error
    FROM pgq.jobs AS j
    CROSS JOIN LATERAL (
        SELECT j.kind = ANY(%(external_kinds)s::text[])
               OR EXISTS (SELECT 1
                          FROM pgq.supervisors AS v
                          WHERE j.kind = ANY(v.external_kinds)) AS unknown
    ) AS x
    JOIN target USING (id)
    LEFT JOIN unnest(%(policy_kinds)s::text[], %(policy_max_attempts)s::integer[])
        AS p(kind, max_attempts) ON p.kind = j.kind
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
    WHERE j.id = d.id
    RETURNING j.id, j.queue, j.kind, j.state, j.attempts, j.created_at, j.started_at,
              j.finished_at, j.errors, j.batch_id, j.order_key
),
recorded AS (
    INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                                 finished_at, errors)
    SELECT id, queue, kind, state, attempts, created_at, started_at, finished_at, errors
    FROM moved
    WHERE state IN ('discarded', 'cancelled')
      AND %(history)s
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
SELECT m.id, m.queue, m.kind, m.state, m.attempts
FROM moved AS m
CROSS JOIN (SELECT count(*) FROM ended) AS e
CROSS JOIN (SELECT count(*) FROM ordered) AS o;

-- name: purge_discarded
-- Deletes up to %(limit)s dead letters and up to %(limit)s cancelled jobs that finished before
-- %(older_than)s; run in a loop. One arm per state, so each reads its own partial index in
-- finish order. %(kind)s and %(queue)s narrow it when given (`dlq purge --kind`); null means any.
WITH dead AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'discarded'
      AND finished_at < %(older_than)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
cancelled AS (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'cancelled'
      AND finished_at < %(older_than)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgq.jobs
WHERE id IN (SELECT id FROM dead UNION ALL SELECT id FROM cancelled);

-- name: history_partitions
-- Creates the daily history partitions from today through %(days_ahead)s days later.
SELECT pgq.ensure_history_partitions(now(), %(days_ahead)s);

-- name: drop_history
-- Drops the oldest history partition whose day ended before %(older_than)s (0 or 1 dropped).
SELECT pgq.drop_history_partitions(%(older_than)s);

-- name: purge_history_default
-- Deletes up to %(limit)s old rows that landed in the default history partition.
DELETE FROM pgq.job_history_default
WHERE ctid = ANY(ARRAY(
    SELECT ctid
    FROM pgq.job_history_default
    WHERE finished_at < %(older_than)s
    LIMIT %(limit)s
));

-- name: table_health
-- Is vacuum keeping up with the job table? Dead tuples should stay far below live ones.
SELECT
    s.n_live_tup,
    s.n_dead_tup,
    s.last_autovacuum,
    s.last_vacuum,
    s.autovacuum_count,
    (SELECT extract(epoch FROM now() - min(run_at))
     FROM pgq.jobs
     WHERE state = 'available' AND run_at <= now()) AS oldest_available_age
FROM pg_stat_user_tables AS s
WHERE s.schemaname = 'pgq'
  AND s.relname = 'jobs';

-- name: claim_maintenance_run
-- Records that %(run_by)s runs the singleton task %(task)s now, unless some supervisor ran it
-- less than %(interval)s seconds ago; returns a row only when this caller should run it, and
-- logs that run in pgq.maintenance_runs. The conditional upsert is atomic on its own (a second
-- caller waits for the first's row and then fails the WHERE); the task's advisory lock around
-- it keeps a run that outlasts its interval from overlapping the next.
WITH claimed AS (
    INSERT INTO pgq.maintenance AS m (task, last_run_at, run_by)
    VALUES (%(task)s, now(), %(run_by)s)
    ON CONFLICT (task) DO UPDATE
    SET last_run_at = now(),
        run_by = EXCLUDED.run_by
    WHERE m.last_run_at <= now() - make_interval(secs => %(interval)s::float8)
    RETURNING task, run_by, last_run_at
)
INSERT INTO pgq.maintenance_runs (task, run_by, started_at)
SELECT task, run_by, last_run_at
FROM claimed
RETURNING started_at;

-- name: maintenance_run_current
-- Whether the run of %(task)s that %(run_by)s started at %(started_at)s is still the task's
-- latest: a run that spans several turns of its master's loop goes on only while no other
-- supervisor has started the next interval's run.
SELECT 1
FROM pgq.maintenance
WHERE task = %(task)s
  AND run_by = %(run_by)s
  AND last_run_at = %(started_at)s;

-- name: purge_maintenance_runs
-- Forgets the log of maintenance runs older than %(older_than)s.
DELETE FROM pgq.maintenance_runs
WHERE started_at < %(older_than)s;

-- name: vacuum_due
-- How many dead rows pgq.jobs holds (every consumed job leaves one, and its entry at the head
-- of the claim index, which each claim steps over until VACUUM removes it), whether this role
-- may vacuum the table (its owner or a superuser, or on PostgreSQL 17 and later a role granted
-- MAINTAIN: %(maintain)s says whether the server knows that privilege), and the xmin horizon:
-- the oldest transaction id that keeps this database's dead rows (a snapshot's xmin, a running
-- transaction's id, a replication slot's xmin, a prepared transaction), as text, or null when
-- nothing holds one. While it stays the same, a VACUUM can remove nothing that the last one
-- left: every transaction older than it had ended when the last one ran. The backends that count
-- are pgq.horizon_backends' (sql/functions/horizon_backends.sql), the doctor's rule too, with
-- the walsenders: a standby's hot_standby_feedback holds the horizon through theirs.
SELECT coalesce(s.n_dead_tup, 0) AS dead_rows,
       pg_has_role(c.relowner, 'USAGE')
           OR CASE WHEN %(maintain)s THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
           AS allowed,
       (SELECT h.xid::text
        FROM (
            SELECT x.xid
            FROM pg_stat_activity AS a
            CROSS JOIN LATERAL (VALUES (a.backend_xmin), (a.backend_xid)) AS x(xid)
            WHERE a.pid IN (SELECT pgq.horizon_backends(true))
            UNION ALL
            SELECT r.xmin FROM pg_replication_slots AS r
            UNION ALL
            SELECT p.transaction FROM pg_prepared_xacts AS p
            WHERE p.database = current_database()
        ) AS h
        WHERE h.xid IS NOT NULL
        ORDER BY age(h.xid) DESC
        LIMIT 1) AS horizon
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = 'pgq.jobs'::regclass;

-- name: vacuum_pace
-- Before a VACUUM of many dead rows (vacuum.paced_above), on the session that sends it: paced
-- as autovacuum's are on this server (autovacuum_vacuum_cost_delay and _limit; where those are
-- -1, vacuum_cost_delay and _limit, as autovacuum reads them). A plain VACUUM is not paced at
-- all: the first one after a 30-minute hold at 3,000 jobs/s (10.9 million dead rows) wrote
-- 1.55 GB of WAL in 20 s and the checkpoints it forced stalled every claim for 1-3 s; paced by
-- the service it ran for about 110 s, and the recovery's pickup p99 was 585 against 2,959 ms
-- side by side (its p50 15.6 against 5.5 ms: the head walks last longer; docs/benchmarks.md).
-- Session settings: VACUUM runs in no transaction block, so no SET LOCAL can carry them (and
-- behind a transaction pooler they would stay on the server connection, so none is sent there).
SELECT set_config(
           'vacuum_cost_delay',
           (SELECT CASE WHEN a.setting::real >= 0 THEN a.setting ELSE v.setting END
            FROM pg_settings AS a, pg_settings AS v
            WHERE a.name = 'autovacuum_vacuum_cost_delay' AND v.name = 'vacuum_cost_delay'),
           false) AS cost_delay,
       set_config(
           'vacuum_cost_limit',
           (SELECT CASE WHEN a.setting::integer > 0 THEN a.setting ELSE v.setting END
            FROM pg_settings AS a, pg_settings AS v
            WHERE a.name = 'autovacuum_vacuum_cost_limit' AND v.name = 'vacuum_cost_limit'),
           false) AS cost_limit;

-- name: vacuum_jobs
-- Sent without waiting for it (the master's loop must not block), on a connection of its own.
-- SKIP_LOCKED: when autovacuum or another host is at it already, this one has nothing to add.
-- pgq.wakeup_flags too: every wake-up leaves a dead row there (0071), at most two for each job
-- consumed, and on a server without autovacuum nothing else would reclaim them; a few pages
-- beside pgq.jobs.
-- TRUNCATE false: giving the empty pages at the table's end back to the system takes an ACCESS
-- EXCLUSIVE lock on pgq.jobs, taken and yielded again and again while the vacuum reads back from
-- the end, and the claims wait on it. After a 30-minute hold at 3,000 jobs/s, the VACUUM after
-- the big one found the end of the table empty, and the claims were seen waiting on the
-- relation lock while it was "truncating heap" (docs/benchmarks.md). A queue's table refills
-- its free pages, so keeping them costs only the disk its largest backlog needed.
VACUUM (SKIP_LOCKED, TRUNCATE false) pgq.jobs, pgq.wakeup_flags;

-- name: purge_results
-- Deletes up to %(limit)s kept results older than %(older_than)s; run in a loop.
DELETE FROM pgq.job_results
WHERE id = ANY(ARRAY(
    SELECT id
    FROM pgq.job_results
    WHERE finished_at < %(older_than)s
    ORDER BY finished_at
    LIMIT %(limit)s
));

-- name: purge_batches
-- Deletes up to %(limit)s batches that finished before %(older_than)s, with their counters
-- (ON DELETE CASCADE); run in a loop. A batch still waiting for members is kept. A workflow's
-- batch takes its steps, edges and gates with it (0050: no foreign keys there, whose checks
-- cost an enqueue of 10,000 steps half its time).
WITH doomed AS (
    SELECT id
    FROM pgq.batches
    WHERE finished_at < %(older_than)s
    ORDER BY id
    LIMIT %(limit)s
),
steps AS (
    DELETE FROM pgq.workflow_steps AS s
    USING doomed AS d
    WHERE s.workflow_id = d.id
    RETURNING s.job_id
),
edges AS (
    DELETE FROM pgq.workflow_edges AS e
    WHERE e.child_id IN (SELECT job_id FROM steps)
),
gates AS (
    DELETE FROM pgq.workflow_gates AS g
    WHERE g.child_id IN (SELECT job_id FROM steps)
)
DELETE FROM pgq.batches
WHERE id = ANY(ARRAY(SELECT id FROM doomed));
