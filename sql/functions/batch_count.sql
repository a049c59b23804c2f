-- pgq.batch_count: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- 0018's pgq.batch_ended, renamed by migration 0050 (workflows) when batch_ended began
-- handing workflow steps on.
--
-- Counts members that ended: job_ids[i] of batch batch_ids[i] ended as outcomes[i]
-- ('completed', 'discarded' or 'cancelled'); entries with a null batch are ignored. Called by
-- every statement that ends jobs (complete, settle, requeue, rescue, cancel, resolve), only
-- when one of its jobs belongs to a batch. Returns how many batches it finished.

CREATE OR REPLACE FUNCTION pgq.batch_count(job_ids bigint[], batch_ids bigint[], outcomes text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    emptied_ids  bigint[];
    emptied_ns   integer[];
    done_ids     bigint[];
    b            bigint;
BEGIN
    -- `locked` takes the shard rows in (batch, shard) order, one lock order for every caller,
    -- so no two statements deadlock on them; the UPDATE reaches a row only through `locked`.
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
        SELECT d.*
        FROM pgq.batch_shards AS s
        JOIN deltas AS d ON d.batch_id = s.batch_id AND d.shard = s.shard
        ORDER BY s.batch_id, s.shard
        FOR UPDATE OF s
    ),
    counted AS (
        UPDATE pgq.batch_shards AS s
        SET remaining = s.remaining - l.n,
            completed = s.completed + l.completed,
            discarded = s.discarded + l.discarded,
            cancelled = s.cancelled + l.cancelled
        FROM locked AS l
        WHERE s.batch_id = l.batch_id
          AND s.shard = l.shard
        RETURNING s.batch_id, s.remaining
    ),
    emptied AS (
        SELECT batch_id, count(*)::integer AS n
        FROM counted
        WHERE remaining = 0
        GROUP BY batch_id
    )
    SELECT array_agg(batch_id ORDER BY batch_id), array_agg(n ORDER BY batch_id)
    INTO emptied_ids, emptied_ns
    FROM emptied;
    IF emptied_ids IS NULL THEN
        RETURN 0;
    END IF;
    WITH locked AS (
        SELECT bt.id
        FROM pgq.batches AS bt
        WHERE bt.id = ANY(emptied_ids)
        ORDER BY bt.id
        FOR UPDATE
    ),
    left_ AS (
        UPDATE pgq.batches AS bt
        SET shards_left = bt.shards_left - e.n
        FROM unnest(emptied_ids, emptied_ns) AS e(id, n)
        JOIN locked AS l ON l.id = e.id
        WHERE bt.id = e.id
        RETURNING bt.id, bt.shards_left
    )
    SELECT array_agg(id ORDER BY id) INTO done_ids
    FROM left_
    WHERE shards_left = 0;
    IF done_ids IS NULL THEN
        RETURN 0;
    END IF;
    FOREACH b IN ARRAY done_ids LOOP
        PERFORM pgq.batch_finish(b);
    END LOOP;
    RETURN cardinality(done_ids);
END;
$$;
