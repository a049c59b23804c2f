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
-- pgq.batch_finish: its definition is sql/functions/batch_finish.sql (applied after the migrations).

-- Counts members that ended: job_ids[i] of batch batch_ids[i] ended as outcomes[i]
-- ('completed', 'discarded' or 'cancelled'); entries with a null batch are ignored. Called by
-- every statement that ends jobs (complete, settle, requeue, rescue, cancel, resolve), only
-- when one of its jobs belongs to a batch. Returns how many batches it finished.
-- pgq.batch_ended: its definition is sql/functions/batch_ended.sql (applied after the migrations).
