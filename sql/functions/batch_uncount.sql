-- pgq.batch_uncount: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Added by migration 0050 (workflows, issue 32).
--
-- Gives back to their batches the count of members that are running again (a replayed dead
-- step, the descendants it re-opens): ended as outcomes[i], each is no longer ended.

CREATE OR REPLACE FUNCTION pgq.batch_uncount(job_ids bigint[], batch_ids bigint[], outcomes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    filled_ids  bigint[];
    filled_ns   integer[];
BEGIN
    WITH deltas AS (
        SELECT e.batch_id, (e.job_id % bt.shards)::integer AS shard, count(*)::integer AS n,
               count(*) FILTER (WHERE e.outcome = 'completed')::integer AS completed,
               count(*) FILTER (WHERE e.outcome = 'discarded')::integer AS discarded,
               count(*) FILTER (WHERE e.outcome = 'cancelled')::integer AS cancelled
        FROM unnest(job_ids, batch_ids, outcomes) AS e(job_id, batch_id, outcome)
        JOIN pgq.batches AS bt ON bt.id = e.batch_id
        GROUP BY 1, 2
    ),
    locked AS (
        SELECT d.*, s.remaining AS before
        FROM pgq.batch_shards AS s
        JOIN deltas AS d ON d.batch_id = s.batch_id AND d.shard = s.shard
        ORDER BY s.batch_id, s.shard
        FOR UPDATE OF s
    ),
    counted AS (
        UPDATE pgq.batch_shards AS s
        SET remaining = s.remaining + l.n,
            completed = s.completed - l.completed,
            discarded = s.discarded - l.discarded,
            cancelled = s.cancelled - l.cancelled
        FROM locked AS l
        WHERE s.batch_id = l.batch_id
          AND s.shard = l.shard
        RETURNING s.batch_id, s.remaining - l.n AS before
    )
    SELECT array_agg(batch_id ORDER BY batch_id), array_agg(k ORDER BY batch_id)
    INTO filled_ids, filled_ns
    FROM (SELECT batch_id, count(*)::integer AS k FROM counted WHERE before = 0
          GROUP BY batch_id) AS f;
    IF filled_ids IS NOT NULL THEN
        WITH locked AS (
            SELECT bt.id FROM pgq.batches AS bt WHERE bt.id = ANY(filled_ids)
            ORDER BY bt.id FOR UPDATE
        )
        UPDATE pgq.batches AS bt
        SET shards_left = bt.shards_left + f.n,
            finished_at = NULL
        FROM unnest(filled_ids, filled_ns) AS f(id, n)
        JOIN locked AS l ON l.id = f.id
        WHERE bt.id = f.id;
    END IF;
END;
$$;
