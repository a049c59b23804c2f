-- Order keys on workflow steps and on a batch's `then` job (issue 33). Both become ready later
-- than they are enqueued: a step when its parents have ended, a `then` job when its batch has.
-- Each joins its key when it becomes ready, not before: a step whose parents are still running
-- does not hold its key (later jobs of the key go ahead of it meanwhile). Joining is what an
-- enqueue does (pgq.order_join): the key free, the job is its head and due as usual; otherwise it
-- waits ('waiting') behind the head and goes in id order, so in the order it was enqueued, among
-- the key's waiting followers (a chain of steps on one key released by its previous step's end
-- goes before the jobs of the key enqueued after the workflow).
--
-- Until then the key is kept on the step's row (or the batch's), not on the job's: a job whose
-- order_key is set and which waits is a follower of its key (jobs_order_waiting, 0067), and a
-- step waiting for its parents must not be released by its key's ending. The release sets the
-- job's order_key and joins, in the releasing statement's transaction (pgq.workflow_ended,
-- pgq.batch_finish); the key's row is then taken after the batch's and the gates' rows, as every
-- ending takes them (batch_ended before order_ended).
--
-- Nullable columns without a default: catalog changes only, no table rewrite.

ALTER TABLE pgq.workflow_steps ADD COLUMN order_key text;
ALTER TABLE pgq.batches ADD COLUMN then_order_key text;

-- pgq.order_join is in sql/functions/; pgq.order_rejoin, workflow_ended, workflow_cancel,
-- workflow_reopen and batch_finish call it or read the new columns there.
