-- The migration runner's own statements (supervisor/queue/migrations.py).

-- name: migrations_bootstrap
-- The schema, the table that records which migrations ran, and the one that records which
-- text of each function of sql/functions/ is in place (its sha256) and the release that put it
-- there (the highest migration it shipped): an older release never puts an older body back.
CREATE SCHEMA IF NOT EXISTS pgq;
CREATE TABLE IF NOT EXISTS pgq.schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS pgq.schema_functions (
    name            text        PRIMARY KEY,
    digest          text        NOT NULL,
    schema_version  integer     NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_table_exists
SELECT to_regclass('pgq.schema_migrations') IS NOT NULL;

-- name: functions_table_exists
-- Whether the record of the functions exists, and whether this role may read it (a
-- least-privilege role granted before the table came cannot: it cannot apply them either).
SELECT to_regclass('pgq.schema_functions') IS NOT NULL,
       coalesce(has_table_privilege(to_regclass('pgq.schema_functions'), 'SELECT'), false);

-- name: recorded_functions
-- Which text of each function is in place, and which release put it there.
SELECT name, digest, schema_version
FROM pgq.schema_functions;

-- name: functions_unchecked
-- For the rest of the functions' transaction (SET LOCAL): bodies created without being checked
-- against the schema, which is an earlier one than theirs.
SELECT set_config('check_function_bodies', 'off', true);

-- name: record_function
INSERT INTO pgq.schema_functions (name, digest, schema_version)
VALUES (%(name)s, %(digest)s, %(schema_version)s)
ON CONFLICT (name) DO UPDATE
SET digest = excluded.digest, schema_version = excluded.schema_version, applied_at = now();

-- name: applied_migrations
SELECT version
FROM pgq.schema_migrations;

-- name: migration_xact_lock
-- Transaction-scoped: works through a transaction pooler and is never left held; two runners
-- take turns, each reading the pending list again under it.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: migration_session_lock
-- For a migration that runs outside a transaction (CREATE INDEX CONCURRENTLY): held by the
-- session across its statements, released at the end (or when the session ends).
SELECT pg_advisory_lock(%(key)s);

-- name: migration_session_unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: migration_lock_timeout
-- How long one try of a migration waits for a lock on a live table (SET LOCAL: it ends with
-- the transaction). While it waits, every statement wanting a conflicting lock queues behind
-- it (claims and lease renewals included), so it gives up soon and tries again later.
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: migration_session_lock_timeout
-- The same for a migration outside a transaction, for the session (reset after it).
SELECT set_config('lock_timeout', %(timeout)s, false);

-- name: record_migration
INSERT INTO pgq.schema_migrations (version, name)
VALUES (%(version)s, %(name)s)
ON CONFLICT (version) DO NOTHING;

-- name: invalid_pgq_indexes
-- Indexes of schema pgq left invalid by an interrupted CREATE INDEX CONCURRENTLY: dropped and
-- built again when their migration runs again (IF NOT EXISTS would keep the broken one). A
-- partitioned index (relkind 'I') is not one: it is invalid only until every partition's index
-- is attached (0041 attaches them one by one), and cannot be dropped concurrently.
SELECT n.nspname, c.relname
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgq'
  AND c.relkind = 'i'
  AND NOT i.indisvalid;

-- name: drop_invalid_index
-- {index} is an identifier, composed with psycopg.sql (DDL takes no parameters).
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: lock_blockers
-- Who holds a lock on a pgq table that a waiting migration wants: named in the error when the
-- migration gives up.
SELECT DISTINCT a.pid, a.usename, a.application_name,
       extract(epoch FROM now() - a.xact_start)::int AS held_s
FROM pg_locks AS l
JOIN pg_class AS c ON c.oid = l.relation
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE n.nspname = 'pgq'
  AND l.granted
  AND a.pid <> pg_backend_pid()
  AND a.xact_start IS NOT NULL
ORDER BY held_s DESC
LIMIT 3;
