-- Sessions: advisory locks and the settings of the supervisor's own sessions.
-- Named queries (loaded by supervisor/queue/queries.py with every other sql/*.sql file; a
-- name defined twice across files is an error). sql/README.md lists what each file holds.
-- Each block starts with "-- name: <name>", then comment lines that describe it, then the SQL.
-- Parameters use psycopg's %(name)s style; every value is a parameter, never formatted in.

-- name: try_advisory_lock
-- Takes a session advisory lock if it is free; true when this session now holds it.
SELECT pg_try_advisory_lock(%(key)s);

-- name: advisory_unlock
-- Releases a session advisory lock this session holds.
SELECT pg_advisory_unlock(%(key)s);

-- name: try_advisory_xact_lock
-- Takes an advisory lock until the end of the current transaction if it is free; true when
-- taken. Holds no session state, so it is safe through a transaction-mode pooler.
SELECT pg_try_advisory_xact_lock(%(key)s);

-- name: session_timeouts
-- A session whose statements must not run long (the doctor's probes).
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false);

-- name: loop_session_timeouts
-- The master's sessions: no statement of its loop may hold it for long, and a transaction the
-- loop gave up on (no answer in time: the network went) is ended by the server instead of
-- holding its locks until the dead connection is noticed (see services/database.py).
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s, false);
