-- pgq.horizon_backends: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- The pids of the backends that hold this database's xmin horizon back: a snapshot's xmin
-- (backend_xmin) or a transaction id (backend_xid). With `walsenders`, also the walsenders
-- (no database), through which a standby's hot_standby_feedback holds it. Left out: the
-- caller's own session, autovacuum workers and a plain VACUUM, whose xmin PostgreSQL does not
-- let hold the horizon (VACUUM FULL does hold it). A session of another role, seen without
-- pg_read_all_stats, shows its xmin but no state or query: it counts.
--
-- The one rule of both readers: the vacuum service's check (sql/maintenance.sql, vacuum_due:
-- no VACUUM while the horizon it saw last stays held) and the doctor's (sql/doctor.sql,
-- horizon: who holds it). Pids, so that each reads the columns it wants from
-- pg_stat_activity, which is one snapshot for the caller's whole transaction. Runs with the
-- caller's rights: a role sees through it what it sees in pg_stat_activity.

CREATE OR REPLACE FUNCTION pgq.horizon_backends(walsenders boolean)
RETURNS SETOF integer
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.pid
    FROM pg_stat_activity AS a
    WHERE (a.datname = current_database() OR (walsenders AND a.datid IS NULL))
      AND a.pid <> pg_backend_pid()
      AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
      AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
      AND NOT coalesce(a.state = 'active'
                       AND a.query ~* '^\s*vacuum\M'
                       AND a.query !~* '^\s*vacuum\s*(\(.*full|full)', false)
$$;
