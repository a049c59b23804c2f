-- Batches (issue 23): `enqueue_batch(conn, jobs, then=NewJob(...))`. The `then` job is enqueued
-- exactly once, when every member has ended (completed, discarded or cancelled), by the same
-- statement (and so the same transaction) that records the last member's outcome.
--
-- Counting without one hot row: a batch's members are split into shards by id (id % shards),
-- each shard a row of pgq.batch_shards holding how many of its members remain. A statement that
-- ends members decrements their shards' rows (locked in (batch, shard) order, so two statements
-- never deadlock on them); only the statement that takes a shard to zero touches the batch row,
-- to count down its shards_left, and the one that takes shards_left to zero enqueues the `then`
-- job. So a member's outcome waits only for the others of its shard, and the batch row is locked
-- once per shard, not once per member. Exactly once: each decrement is serialised by its row
-- lock, so exactly one statement sees a shard reach zero, and exactly one sees the last shard.

CREATE TABLE pgq.batches (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    total              integer     NOT NULL,
    shards             integer     NOT NULL,
    shards_left        integer     NOT NULL,
    -- The `then` job as it will be enqueued (null kind: a batch without one).
    then_kind          text,
    then_queue         text,
    then_args          jsonb,
    then_priority      smallint,
    then_max_attempts  integer,
    then_delay         float8,
    then_job_id        bigint,
    created_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    CONSTRAINT batches_shards_check CHECK (shards >= 1 AND shards_left >= 0)
);

CREATE TABLE pgq.batch_shards (
    batch_id   bigint  NOT NULL REFERENCES pgq.batches (id) ON DELETE CASCADE,
    shard      integer NOT NULL,
    remaining  integer NOT NULL,
    completed  integer NOT NULL DEFAULT 0,
    discarded  integer NOT NULL DEFAULT 0,
    cancelled  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard),
    CONSTRAINT batch_shards_remaining_check CHECK (remaining >= 0)
) WITH (
    -- Decrements are HOT updates (no indexed column changes) when the page has room.
    fillfactor = 50
);

-- A member's batch (no foreign key: the check would cost every member's insert a look-up, and
-- a batch row is never deleted while members live). Nullable without default: no rewrite.
ALTER TABLE pgq.jobs ADD COLUMN batch_id bigint;
-- The `then` job's view of its batch: {"id", "total", "completed", "discarded", "cancelled"}.
ALTER TABLE pgq.jobs ADD COLUMN batch jsonb;

-- Enqueues batch `b`'s `then` job (the caller holds the batch row's lock) with the counts
-- summed over its shards, and marks the batch finished. Returns the new job's id (null when the
-- batch has no `then` job).
CREATE FUNCTION pgq.batch_finish(b bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec    pgq.batches%ROWTYPE;
    counts  jsonb;
    job_id  bigint;
BEGIN
    SELECT * INTO spec FROM pgq.batches WHERE id = b;
    IF spec.finished_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT jsonb_build_object(
               'id', b,
               'total', spec.total,
               'completed', coalesce(sum(s.completed), 0),
               'discarded', coalesce(sum(s.discarded), 0),
               'cancelled', coalesce(sum(s.cancelled), 0))
    INTO counts
    FROM pgq.batch_shards AS s
    WHERE s.batch_id = b;
    IF spec.then_kind IS NOT NULL THEN
        INSERT INTO pgq.jobs (queue, kind, args, priority, max_attempts, run_at, state, batch)
        VALUES (spec.then_queue, spec.then_kind, spec.then_args, spec.then_priority,
                spec.then_max_attempts, now() + make_interval(secs => spec.then_delay),
                CASE WHEN spec.then_delay > 0 THEN 'scheduled' ELSE 'available' END, counts)
        RETURNING id INTO job_id;
        IF spec.then_delay > 0 THEN
            PERFORM pg_notify('pgq_scheduled', '');
        ELSE
            PERFORM pg_notify('pgq_jobs', spec.then_queue);
        END IF;
    END IF;
    UPDATE pgq.batches
    SET finished_at = now(),
        then_job_id = job_id
    WHERE id = b;
    RETURN job_id;
END;
$$;

-- Counts members that ended: job_ids[i] of batch batch_ids[i] ended as outcomes[i]
-- ('completed', 'discarded' or 'cancelled'); entries with a null batch are ignored. Called by
-- every statement that ends jobs (complete, settle, requeue, rescue, cancel, resolve), only
-- when one of its jobs belongs to a batch. Returns how many batches it finished.
CREATE FUNCTION pgq.batch_ended(job_ids bigint[], batch_ids bigint[], outcomes text[])
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
