-- pgq.wakes_stagers: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0036 before the functions had files of their own.

CREATE OR REPLACE FUNCTION pgq.wakes_stagers(run_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT run_at < now() + interval '10 seconds'
$$;
