-- pgq.error_kept: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0009 before the functions had files of their own.
--
-- The errors after `error` is added for `attempt`: the most recent 25, oldest first; `errors`
-- unchanged when `error` is null (a write that keeps last_error). A single SELECT without SET
-- or STRICT, so the planner inlines it into the statements that call it. The 24 in the path
-- keeps 24 old entries beside the new one; jsonpath's lax mode clamps it for shorter arrays.

CREATE OR REPLACE FUNCTION pgq.error_kept(errors jsonb, attempt integer, error text)
RETURNS jsonb
LANGUAGE sql
STABLE
PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN error IS NULL THEN errors
        ELSE pg_catalog.jsonb_path_query_array(coalesce(errors, '[]'), '$[last - 23 to last]')
             || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                    'seq', coalesce((errors -> -1 ->> 'seq')::integer, 0) + 1,
                    'attempt', attempt,
                    'at', pg_catalog.to_char(pg_catalog.now() AT TIME ZONE 'UTC',
                                             'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
                    'error', error))
    END
$$;
