-- pgq.keep_results: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
--
-- Keeps the results of the completed jobs ids[i] (of kinds[i], attempt attempts[i]): results is
-- the claim's JSON array of [id, value] pairs; only the ids given (those the completion deleted,
-- so still ours) are kept. A function, called only when some job returned something, so a
-- completion without results plans and opens nothing of pgq.job_results. PL/pgSQL, so its plan
-- is kept for the session: as LANGUAGE sql (never inlined: it writes, and has a SET) it was
-- planned again at every call before PostgreSQL 18, 210 against 95 us a call on 15.

CREATE OR REPLACE FUNCTION pgq.keep_results(ids bigint[], kinds text[], attempts integer[], results jsonb)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kept integer;
BEGIN
    INSERT INTO pgq.job_results (id, kind, result, attempt)
    SELECT d.id, d.kind, r.value -> 1, d.attempt
    FROM jsonb_array_elements(results) AS r(value)
    JOIN unnest(ids, kinds, attempts) AS d(id, kind, attempt)
        ON d.id = (r.value ->> 0)::bigint
    ON CONFLICT (id) DO UPDATE
    SET kind = EXCLUDED.kind,
        result = EXCLUDED.result,
        attempt = EXCLUDED.attempt,
        finished_at = EXCLUDED.finished_at;
    GET DIAGNOSTICS kept = ROW_COUNT;
    RETURN kept;
END;
$$;
