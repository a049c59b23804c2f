-- A least-privilege role for supervisors and applications (optional).
--
-- Members can enqueue, claim, finish, rescue, purge and replay jobs and register in the process
-- registry; they cannot create, alter or drop anything in the schema. Run it as the schema's
-- owner after `pgq-supervisor migrate`, and again after later migrations (new tables need
-- their grants):
--
--     psql "$OWNER_DSN" -f sql/roles/worker_role.sql
--     psql "$OWNER_DSN" -c "CREATE ROLE app_worker LOGIN PASSWORD '...' IN ROLE pgq_worker"
--
-- Then set `database.auto_migrate: false` for supervisors that connect as such a role.

DO $$
BEGIN
    CREATE ROLE pgq_worker NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$$;

GRANT USAGE ON SCHEMA pgq TO pgq_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgq TO pgq_worker;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA pgq TO pgq_worker;
-- The history partition functions run with their owner's rights (SECURITY DEFINER): creating
-- and dropping partitions is the one piece of DDL the supervisor needs.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgq TO pgq_worker;
-- Read-only: the role may see which migrations ran, not record new ones.
REVOKE INSERT, UPDATE, DELETE ON pgq.schema_migrations FROM pgq_worker;
REVOKE INSERT, UPDATE, DELETE ON pgq.schema_functions FROM pgq_worker;
-- PostgreSQL 17 and later: MAINTAIN lets the supervisor's vacuum service VACUUM pgq.jobs and
-- pgq.wakeup_flags without owning them (on older servers that is left to autovacuum).
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON pgq.jobs, pgq.wakeup_flags TO pgq_worker';
    END IF;
END
$$;
