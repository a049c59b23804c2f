-- Registry and wake-ups: supervisors' heartbeats, their workers, the queues' wake-up flags.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: heartbeat_supervisor
-- Registers a supervisor, or refreshes its heartbeat, with the kinds its YAML declares
-- `effects: external` (a reload may change them), which every host's rescuer honours.
INSERT INTO pgq.supervisors (id, host, pid, config, external_kinds)
VALUES (%(id)s, %(host)s, %(pid)s, %(config)s, %(external_kinds)s::text[])
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(),
    external_kinds = EXCLUDED.external_kinds;

-- name: clear_workers
-- Forgets a supervisor's children before their current list is written again.
DELETE FROM pgq.workers
WHERE supervisor_id = %(id)s;

-- name: record_workers
-- Writes a supervisor's children as they are now.
INSERT INTO pgq.workers (supervisor_id, worker_id, pool, slot, pid, state, job_id, kind,
                         job_started, spawned_at, rss_bytes)
SELECT %(id)s, w.worker_id, w.pool, w.slot, w.pid, w.state, w.job_id, w.kind,
       w.job_started, w.spawned_at, w.rss_bytes
FROM unnest(
    %(worker_ids)s::text[],
    %(pools)s::text[],
    %(slots)s::integer[],
    %(pids)s::integer[],
    %(states)s::text[],
    %(job_ids)s::bigint[],
    %(kinds)s::text[],
    %(job_starts)s::timestamptz[],
    %(spawned)s::timestamptz[],
    %(rss)s::bigint[]
) AS w(worker_id, pool, slot, pid, state, job_id, kind, job_started, spawned_at, rss_bytes);

-- name: prune_supervisors
-- Forgets supervisors (and, by cascade, their children) that stopped heartbeating. The wake-up
-- flags are the queues', not theirs (0071): one left up costs a single NOTIFY.
DELETE FROM pgq.supervisors
WHERE heartbeat_at < now() - make_interval(secs => %(stale_after)s::float8)
RETURNING id, host, pid;

-- name: unregister_supervisor
-- A supervisor that stops cleanly removes itself.
DELETE FROM pgq.supervisors
WHERE id = %(id)s;

-- name: want_wakeups
-- A master raises the wake-up flags of the queues in %(queues)s (pgq.want_wakeups, a function
-- so that its plans are made once a session: sql/functions/want_wakeups.sql). Returns the
-- queues whose flag went up.
SELECT queue
FROM pgq.want_wakeups(%(supervisor_id)s, %(queues)s::text[]);

-- name: list_supervisors
-- Live supervisors, for status.
SELECT id, host, pid, config, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
FROM pgq.supervisors
ORDER BY host, started_at;

-- name: list_workers
-- Children of live supervisors, for status. Rows are a snapshot taken at the supervisor's last
-- heartbeat, so a job's age is measured to that moment: a fast job seen in a 5-second-old
-- snapshot ran for milliseconds, not for 5 seconds.
SELECT w.supervisor_id, w.worker_id, w.pool, w.slot, w.pid, w.state, w.job_id, w.kind,
       w.job_started,
       greatest(0, extract(epoch FROM s.heartbeat_at - w.job_started))::float8 AS job_age,
       w.spawned_at, w.rss_bytes
FROM pgq.workers AS w
JOIN pgq.supervisors AS s ON s.id = w.supervisor_id
ORDER BY w.supervisor_id, w.pool, w.slot;
