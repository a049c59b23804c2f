-- Named queries of `pgq-supervisor doctor` (supervisor/doctor/), loaded with every sql/*.sql file.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Every one of them only reads: the doctor never changes anything (the claim's EXPLAIN ANALYZE
-- runs the real claim inside a transaction that is rolled back; see explain_options).
-- Several return one row holding one JSON document, so the master (which reads results as
-- text, without waiting) and the dashboard (async) parse exactly what the CLI parses.

-- name: horizon
-- Who holds the xmin horizon of this database, so VACUUM cannot remove pgq.jobs' dead rows:
-- backends of this database with a snapshot (backend_xmin) or a transaction id (backend_xid),
-- oldest first; prepared transactions; replication slots (their xmin and the WAL they keep);
-- standbys that send hot_standby_feedback. Without pg_read_all_stats, sessions of other roles
-- show their pid, role, application and xmin, but no state, times or query (backend_type is
-- null): "visible" says which, and "hidden" lists them, so the doctor can say what it cannot
-- see. No parameters: the master sends it as a simple query.
SELECT json_build_object(
    'can_read_all_stats',
        (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
        OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
    'role', current_user,
    'backends', (
        SELECT coalesce(json_agg(b), '[]'::json)
        FROM (
            SELECT a.pid,
                   a.usename AS "user",
                   a.application_name,
                   coalesce(host(a.client_addr), CASE WHEN a.client_port = -1 THEN 'local socket' END)
                       AS client,
                   a.state,
                   a.backend_type,
                   a.backend_type IS NOT NULL AS visible,
                   extract(epoch FROM now() - a.xact_start)::float8 AS xact_seconds,
                   extract(epoch FROM now() - a.query_start)::float8 AS query_seconds,
                   a.query_start,
                   left(a.query, 300) AS query,
                   a.backend_xmin::text AS backend_xmin,
                   a.backend_xid::text AS backend_xid,
                   greatest(age(a.backend_xmin), age(a.backend_xid)) AS xid_age
            FROM pg_stat_activity AS a
            -- The vacuum service's rule too (sql/functions/horizon_backends.sql): not this
            -- session, not autovacuum or a plain VACUUM. Standbys are reported apart.
            WHERE a.pid IN (SELECT pgq.horizon_backends(false))
            ORDER BY greatest(age(a.backend_xmin), age(a.backend_xid)) DESC, a.xact_start
            LIMIT 5
        ) AS b
    ),
    'hidden', (
        SELECT coalesce(json_agg(h), '[]'::json)
        FROM (
            SELECT a.pid, a.usename AS "user", a.application_name,
                   a.backend_xmin::text AS backend_xmin
            FROM pg_stat_activity AS a
            WHERE a.datname = current_database()
              AND a.pid <> pg_backend_pid()
              AND a.usename IS NOT NULL
              AND a.backend_type IS NULL
            ORDER BY a.pid
            LIMIT 20
        ) AS h
    ),
    'prepared', (
        SELECT coalesce(json_agg(p), '[]'::json)
        FROM (
            SELECT gid, owner, database,
                   extract(epoch FROM now() - prepared)::float8 AS seconds,
                   age(transaction) AS xid_age
            FROM pg_prepared_xacts
            ORDER BY prepared
            LIMIT 5
        ) AS p
    ),
    'slots', (
        SELECT coalesce(json_agg(s), '[]'::json)
        FROM (
            SELECT slot_name AS name,
                   slot_type AS type,
                   database,
                   active,
                   active_pid,
                   xmin::text AS xmin,
                   catalog_xmin::text AS catalog_xmin,
                   greatest(age(xmin), age(catalog_xmin)) AS xid_age,
                   wal_status,
                   pg_wal_lsn_diff(
                       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn()
                            ELSE pg_current_wal_lsn() END,
                       restart_lsn)::bigint AS wal_retained
            FROM pg_replication_slots
            ORDER BY wal_retained DESC NULLS LAST
        ) AS s
    ),
    'standbys', (
        SELECT coalesce(json_agg(r), '[]'::json)
        FROM (
            SELECT pid, application_name, host(client_addr) AS client, state,
                   backend_xmin::text AS backend_xmin, age(backend_xmin) AS xid_age
            FROM pg_stat_replication
            WHERE backend_xmin IS NOT NULL
        ) AS r
    ),
    'hot_standby_feedback', current_setting('hot_standby_feedback'),
    'in_recovery', pg_is_in_recovery(),
    'jobs', (
        SELECT json_build_object(
            'dead_rows', coalesce(s.n_dead_tup, 0),
            'live_rows', coalesce(s.n_live_tup, 0),
            'last_vacuum', greatest(s.last_vacuum, s.last_autovacuum))
        FROM pg_stat_user_tables AS s
        WHERE s.relid = 'pgq.jobs'::regclass
    )
);

-- name: vacuum
-- Vacuum and bloat of pgq.jobs, from the statistics views and the catalog (no scan of the
-- table): dead and live rows, the last vacuums, the sizes of the table and of the claim index,
-- the average width of a row from pg_stats (to estimate what the live rows need), when its
-- statistics were last gathered and how much changed since, the autovacuum settings on the
-- table and the server's, and the vacuum service's recent runs.
SELECT json_build_object(
    'live_rows', coalesce(s.n_live_tup, 0),
    'dead_rows', coalesce(s.n_dead_tup, 0),
    'last_vacuum', s.last_vacuum,
    'last_autovacuum', s.last_autovacuum,
    'vacuum_seconds_ago',
        extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8,
    'autovacuum_count', s.autovacuum_count,
    'vacuum_count', s.vacuum_count,
    'analyzed', (s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL),
    'analyze_seconds_ago',
        extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze))::float8,
    'changed_since_analyze', coalesce(s.n_mod_since_analyze, 0),
    'rows_at_analyze', c.reltuples,
    'table_bytes', pg_table_size(c.oid),
    'row_width', (
        SELECT sum(st.avg_width)
        FROM pg_stats AS st
        WHERE st.schemaname = 'pgq' AND st.tablename = 'jobs'
    ),
    'claim_index', (
        SELECT json_agg(json_build_object(
            'name', i.relname,
            'bytes', pg_relation_size(i.oid),
            'entries', i.reltuples,
            'valid', x.indisvalid))
        FROM pg_index AS x
        JOIN pg_class AS i ON i.oid = x.indexrelid
        WHERE x.indrelid = c.oid
          AND i.relname LIKE 'jobs\_claim%'
    ),
    'reloptions', coalesce(to_json(c.reloptions), '[]'::json),
    'autovacuum', current_setting('autovacuum'),
    'track_counts', current_setting('track_counts'),
    'naptime', current_setting('autovacuum_naptime'),
    'pgstattuple', EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple'),
    'service_runs', (
        SELECT json_build_object(
            'last_hour', count(*),
            'last_seconds_ago', extract(epoch FROM now() - max(started_at))::float8)
        FROM pgq.maintenance_runs
        WHERE task = 'vacuum'
          AND started_at > now() - interval '1 hour'
    )
)
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = 'pgq.jobs'::regclass;

-- name: available_jobs
-- Due and future jobs in the claim index (state 'available'), what its live entries are: read
-- from the index itself, bounded by the doctor's statement timeout like every check.
SELECT count(*) FROM pgq.jobs WHERE state = 'available';

-- name: pgstattuple
-- Exact figures when the pgstattuple extension is installed (it reads the table and the index:
-- bounded by the statement timeout; needs pg_stat_scan_tables or superuser).
SELECT json_build_object(
    'dead_percent', t.dead_tuple_percent,
    'free_percent', t.approx_free_percent,
    'leaf_density', (
        SELECT avg_leaf_density
        FROM pgstatindex((
            SELECT min(x.indexrelid)::regclass
            FROM pg_index AS x
            JOIN pg_class AS i ON i.oid = x.indexrelid
            WHERE x.indrelid = 'pgq.jobs'::regclass
              AND i.relname LIKE 'jobs\_claim%'
        ))
    )
)
FROM pgstattuple_approx('pgq.jobs'::regclass) AS t;

-- name: invalid_indexes
-- Indexes on pgq.jobs that PostgreSQL does not use (a CREATE INDEX CONCURRENTLY that failed).
SELECT i.relname
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
WHERE x.indrelid = 'pgq.jobs'::regclass
  AND NOT x.indisvalid
ORDER BY 1;

-- name: table_pages
-- pgq.jobs' size in pages, as the planner sees it: a sequential scan of a tiny table is fine.
SELECT greatest(c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int)
FROM pg_class AS c
WHERE c.oid = 'pgq.jobs'::regclass;

-- name: explain_options
-- Put in front of the real claim statement (sql/claim.sql) by the claim check, which
-- runs it in a transaction it rolls back: the rows it locks are released at once, and the one
-- value of pgq.lease_seq it takes is never reused (fencing tokens only need to be unique).
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)

-- name: local_timeout
-- The dashboard's doctor page: its transaction's statements and lock waits are cut short past
-- %(timeout)s (a text such as '2s').
SELECT set_config('statement_timeout', %(timeout)s, true),
       set_config('lock_timeout', %(timeout)s, true);

-- name: pressure
-- What presses on the queue right now: the NOTIFY queue's fill (and the sessions that may be
-- keeping it from draining: listeners that do not read what they are sent wait on ClientWrite,
-- and a listener inside a transaction reads nothing until it ends), connections against
-- max_connections with ours (application_name pgq-supervisor*) by client host, lock waits on
-- pgq's tables (who waits, and whom for), running jobs whose lease is about to expire or has
-- expired (from the small jobs_lease index). It takes a parameter, so a literal % is %%.
SELECT json_build_object(
    'notify_usage', pg_notification_queue_usage(),
    'notify_suspects', (
        SELECT coalesce(json_agg(n), '[]'::json)
        FROM (
            SELECT a.pid, a.usename AS "user", a.application_name, a.datname AS database,
                   a.state, a.wait_event,
                   extract(epoch FROM now() - coalesce(a.xact_start, a.state_change))::float8
                       AS seconds
            FROM pg_stat_activity AS a
            WHERE a.pid <> pg_backend_pid()
              AND a.backend_type = 'client backend'
              AND ((a.state = 'idle' AND a.wait_event = 'ClientWrite')
                   OR a.state LIKE 'idle in transaction%%')
            ORDER BY (a.wait_event = 'ClientWrite') DESC, a.xact_start
            LIMIT 5
        ) AS n
    ),
    'max_connections', current_setting('max_connections')::int,
    'reserved', current_setting('superuser_reserved_connections')::int,
    'connections', (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
    'ours', (
        SELECT coalesce(json_agg(o), '[]'::json)
        FROM (
            SELECT coalesce(host(client_addr), 'local socket') AS host, count(*) AS sessions
            FROM pg_stat_activity
            WHERE backend_type = 'client backend'
              AND application_name LIKE 'pgq-supervisor%%'
            GROUP BY 1
            ORDER BY 2 DESC
        ) AS o
    ),
    'lock_waits', (
        SELECT coalesce(json_agg(w), '[]'::json)
        FROM (
            SELECT a.pid, a.application_name, l.mode, c.relname AS "table",
                   extract(epoch FROM now() - a.state_change)::float8 AS seconds,
                   pg_blocking_pids(a.pid) AS blocked_by,
                   (SELECT json_agg(json_build_object(
                        'pid', b.pid, 'application_name', b.application_name, 'state', b.state,
                        'xact_seconds', extract(epoch FROM now() - b.xact_start)::float8))
                    FROM pg_stat_activity AS b
                    WHERE b.pid = ANY (pg_blocking_pids(a.pid))) AS blockers
            FROM pg_locks AS l
            JOIN pg_class AS c ON c.oid = l.relation
            JOIN pg_namespace AS ns ON ns.oid = c.relnamespace AND ns.nspname = 'pgq'
            JOIN pg_stat_activity AS a ON a.pid = l.pid
            WHERE NOT l.granted
            ORDER BY a.state_change
            LIMIT 5
        ) AS w
    ),
    'leases', (
        SELECT json_build_object(
            'running', count(*),
            'expired', count(*) FILTER (WHERE lease_until < now()),
            'expiring', count(*) FILTER (
                WHERE lease_until >= now()
                  AND lease_until < now() + make_interval(secs => %(lease_margin)s::float8)))
        FROM pgq.jobs
        WHERE state = 'running'
    )
);

-- name: oldest_due
-- The oldest due job (its wait, queue and id). The claim index orders by priority before
-- run_at, so this reads every due job's entry (measured: 0.6 s at 200,000): the command runs
-- it, bounded by its statement timeout; the dashboard's page, refreshed every few seconds, not.
SELECT json_build_object(
    'seconds', extract(epoch FROM now() - run_at)::float8, 'queue', queue, 'id', id)
FROM pgq.jobs
WHERE state = 'available' AND run_at <= now()
ORDER BY run_at
LIMIT 1;

-- name: row_writes
-- Rows inserted, updated and deleted since the statistics were reset, for pgq's tables and for
-- every other table of this database, and the server's WAL position (its difference over the
-- sample is the WAL the whole server wrote). The headroom check reads it twice, a moment apart,
-- in two transactions (a transaction caches the statistics it read).
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del) FILTER (WHERE schemaname = 'pgq'), 0)
           ::bigint AS queue,
       coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del) FILTER (WHERE schemaname <> 'pgq'), 0)
           ::bigint AS other,
       pg_wal_lsn_diff(
           CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                ELSE pg_current_wal_lsn() END,
           '0/0')::bigint AS wal_position,
       clock_timestamp() AS at
FROM pg_stat_user_tables;

-- name: replication
-- The replication this server takes part in, as the doctor's report shows it: whether it is a
-- standby (the queue needs the primary), the synchronous settings, and each standby streaming
-- from it: its state, whether it is synchronous, how far behind it is (bytes of WAL not yet
-- replayed, and the lag times PostgreSQL measures) and the xmin it sends through
-- hot_standby_feedback (which holds this server's horizon), read from its replication slot
-- when it streams through one. On a standby: what its WAL
-- receiver sees and how long ago it replayed the last transaction. No parameters.
SELECT json_build_object(
    'in_recovery', pg_is_in_recovery(),
    'synchronous_standby_names', current_setting('synchronous_standby_names'),
    'synchronous_commit', current_setting('synchronous_commit'),
    'hot_standby_feedback', current_setting('hot_standby_feedback'),
    'standbys', (
        SELECT coalesce(json_agg(r ORDER BY r.application_name), '[]'::json)
        FROM (
            SELECT r.application_name, host(r.client_addr) AS client, r.state, r.sync_state,
                   CASE WHEN pg_is_in_recovery() THEN NULL
                        ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn)::bigint
                   END AS replay_lag_bytes,
                   extract(epoch FROM r.replay_lag)::float8 AS replay_lag_seconds,
                   extract(epoch FROM r.flush_lag)::float8 AS flush_lag_seconds,
                   -- Through a replication slot (as Patroni streams), the standby's
                   -- feedback xmin is kept in the slot, and backend_xmin stays null.
                   coalesce(r.backend_xmin, s.xmin)::text AS backend_xmin,
                   age(coalesce(r.backend_xmin, s.xmin)) AS xid_age,
                   s.slot_name
            FROM pg_stat_replication AS r
            LEFT JOIN pg_replication_slots AS s ON s.active_pid = r.pid
        ) AS r
    ),
    'receiver', (
        SELECT json_build_object('status', status, 'sender_host', sender_host,
                                 'sender_port', sender_port)
        FROM pg_stat_wal_receiver
    ),
    'replay_delay_seconds', CASE WHEN pg_is_in_recovery() THEN
        extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END,
    'unreplayed_bytes', CASE WHEN pg_is_in_recovery() THEN
        pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint END
);

-- name: any_limit
-- Whether the database holds a limit: the claim variant children send depends on it
-- (supervisor.queue.claim_builder.variant). The first key, by the primary key.
SELECT (SELECT l.queue FROM pgq.queue_limits AS l ORDER BY l.queue LIMIT 1) IS NOT NULL
