-- What a handler returned (issue 23): `supervisor.result(conn, id)`, `jobs show ID --json`, the
-- job's page. A completed job leaves pgq.jobs, so its result lives here, written by the same
-- statement that deletes it (fenced: a completion that lost its lease writes nothing), whether
-- or not history is kept. A handler that returns None writes no row: jobs without results pay
-- nothing. Purged with the history (history.keep), in bounded slices by finished_at.
CREATE TABLE pgq.job_results (
    id           bigint      PRIMARY KEY,
    kind         text        NOT NULL,
    result       jsonb       NOT NULL,
    attempt      integer     NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now()
) WITH (
    autovacuum_vacuum_scale_factor = 0.02
);

CREATE INDEX job_results_finished ON pgq.job_results (finished_at);

-- Keeps the results of the completed jobs ids[i] (of kinds[i], attempt attempts[i]): results is
-- the claim's JSON array of [id, value] pairs; only the ids given (those the completion deleted,
-- so still ours) are kept. A function, called only when some job returned something, so a
-- completion without results plans and opens nothing of pgq.job_results.
-- pgq.keep_results: its definition is sql/functions/keep_results.sql (applied after the migrations).
