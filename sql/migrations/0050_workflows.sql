-- Workflows (issue 32): a graph of jobs enqueued in one transaction, each step waiting in state
-- 'waiting' (outside the claim index: jobs_claim covers only 'available') until every parent
-- has ended, then released by the statement, and so the transaction, that records its last
-- parent's ending.
--
-- A workflow is a batch (0018) of all its steps, plus edges. So every statement that ends jobs
-- (the claim's completions, settle, requeue, rescue, cancel, resolve) already reports its steps
-- through pgq.batch_ended, with no change of its own: batch_ended now also hands the steps of
-- workflows to pgq.workflow_ended, which counts down their children and releases the ready
-- ones. The batch's counters give the workflow's progress and its end (finished_at).
--
-- Counting without one hot row (a fan-in of 1,000 parents must not serialise 1,000
-- completions on one row): a step's parents are split into gates by id (parent id % shards),
-- each a row of pgq.workflow_gates holding how many of its parents have not ended. An ending
-- decrements its children's gates (locked in (child, shard) order, one order for every caller);
-- only the decrement that empties a gate touches the child's step row (shards_left), and the
-- one that empties the last gate releases the child. Exactly once: each decrement is
-- serialised by its row's lock, so one statement sees each gate reach zero, and one sees the
-- last; the release itself is fenced on state = 'waiting'. A parent's ending waits only for the
-- other parents of its gate (32 of them at most, consecutive ids spread over the gates).

ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled', 'cancelled', 'unknown',
                     'waiting'))
    NOT VALID;

-- Whether a batch is a workflow's, its name, and when an operator cancelled it.
ALTER TABLE pgq.batches ADD COLUMN workflow boolean NOT NULL DEFAULT false;
ALTER TABLE pgq.batches ADD COLUMN workflow_name text;
ALTER TABLE pgq.batches ADD COLUMN cancelled_at timestamptz;

-- One row per step, kept after its job row is gone (a completion deletes it): what `workflows
-- show` and a child's `job.parents` read. Updated when the step ends and when its gates empty.
--
-- No foreign keys in the three workflow tables: a workflow is written whole by one statement
-- (sql/workflows.sql, enqueue_workflow) and removed whole by the purge of its batch
-- (purge_batches), and the checks cost a 10,000-step enqueue half its time (0.3 of 0.5 s).
CREATE TABLE pgq.workflow_steps (
    job_id             bigint      PRIMARY KEY,
    workflow_id        bigint      NOT NULL,
    position           integer     NOT NULL,
    kind               text        NOT NULL,
    queue              text        NOT NULL,
    on_parent_failure  text        NOT NULL DEFAULT 'cancel',
    parents            integer     NOT NULL,
    shards             integer     NOT NULL,
    shards_left        integer     NOT NULL,
    -- Seconds from the release to when it is due (NewJob.delay of a step with parents).
    delay              float8      NOT NULL DEFAULT 0,
    -- How it ended: 'completed', 'discarded' or 'cancelled'; null while it has not.
    outcome            text,
    -- Why it was cancelled without running: 'parent' (a parent failed), 'workflow' (the
    -- workflow was cancelled); null otherwise. A replay re-opens only the 'parent' ones.
    cause              text,
    released_at        timestamptz,
    ended_at           timestamptz,
    CONSTRAINT workflow_steps_policy_check CHECK (on_parent_failure IN ('cancel', 'run')),
    CONSTRAINT workflow_steps_shards_check CHECK (shards >= 1 AND shards_left >= 0)
) WITH (
    fillfactor = 70
);

CREATE INDEX workflow_steps_workflow ON pgq.workflow_steps (workflow_id, position);

CREATE TABLE pgq.workflow_edges (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);

-- A child's parents: its `job.parents`, the gates' recount after a replay.
CREATE INDEX workflow_edges_child ON pgq.workflow_edges (child_id, parent_id);

CREATE TABLE pgq.workflow_gates (
    child_id   bigint  NOT NULL,
    shard      integer NOT NULL,
    remaining  integer NOT NULL,
    PRIMARY KEY (child_id, shard),
    CONSTRAINT workflow_gates_remaining_check CHECK (remaining >= 0)
) WITH (
    -- Decrements are HOT updates (no indexed column changes) when the page has room.
    fillfactor = 50
);

-- The functions of workflows (workflow_parents, workflow_ended, workflow_reopen,
-- workflow_cancel), batch_uncount, batch_count (0018's counting, under its own name) and the
-- batch_ended that hands workflow steps on are in sql/functions/, applied after the migrations.
