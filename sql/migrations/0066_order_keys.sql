-- Order keys (issue 33): `enqueue(..., order_key=K)`. Inside a queue, the jobs of one key start
-- one at a time, in the order they were enqueued; a retried job holds the ones after it until it
-- ends, one discarded or cancelled lets them go on, one whose outcome is unknown holds them until
-- it is resolved.
--
-- How, without costing the claim: a key's first unfinished job (its head) is written as usual
-- (available or scheduled); every later one (a follower) is written 'waiting', the state of a
-- workflow step (0050), outside the claim index (jobs_claim_tenant covers only 'available'), so
-- the claim never walks a key's followers however many wait. pgq.order_keys holds, per (queue,
-- key), how many of its jobs have not ended and which one is its head: an enqueue upserts the
-- row (the count it returns says head or follower), and the statement that ends the head for
-- good (completed, discarded, cancelled; not a retry, not 'unknown') counts it down and releases
-- the key's next follower (the lowest id, by 0067's index) in its own transaction, or deletes
-- the row when none is left (pgq.order_ended). Concurrent producers of a key and a concurrent
-- ending serialise on that row's lock, so the ids of a key's jobs follow the order they were
-- enqueued in, and exactly one of its unfinished jobs is ever out of 'waiting'.
--
-- A nullable column without a default: a catalog change only, no table rewrite.

ALTER TABLE pgq.jobs ADD COLUMN order_key text;

CREATE TABLE pgq.order_keys (
    queue       text    NOT NULL,
    key         text    NOT NULL,
    -- The key's jobs not ended yet: its head and the followers waiting behind it.
    unfinished  integer NOT NULL,
    -- The job that holds the key now (available, scheduled, running or unknown): what
    -- `jobs show` of a follower names as the job it waits for.
    head_id     bigint  NOT NULL,
    PRIMARY KEY (queue, key),
    CONSTRAINT order_keys_unfinished_check CHECK (unfinished >= 1)
) WITH (
    -- Every enqueue and ending of a key updates its row: HOT updates (no indexed column
    -- changes) when the page has room.
    fillfactor = 70
);

-- pgq.order_ended, order_rejoin, order_unjoin and order_head are in sql/functions/, applied after
-- the migrations;
-- pgq.enqueue gains `order_key text` there (sql/functions/enqueue.sql).
