-- Enqueue without a NOTIFY per transaction (issue 20). NOTIFY takes a database-wide lock at
-- commit, held across the commit record's flush, so every enqueue transaction that notified
-- committed one after another: 16 concurrent producers reached a quarter of a plain INSERT.
--
-- A master records here, per queue it serves, that it has a child asleep waiting for that
-- queue's wake-up (wanted). The first enqueue of a due job to the queue takes the flag (sets
-- wanted back to false) and sends the one NOTIFY; the enqueues after it find the flag down and
-- send none, until the master, having woken a child, raises it again for the children still
-- asleep. So the NOTIFYs follow the wake-ups the masters can use, not the jobs. A flag row
-- another enqueue holds (its transaction has taken it and will notify at its commit) is
-- skipped, never waited for: an enqueue never queues behind another's open transaction.
-- The poll (poll_interval) remains the safety net: an enqueue whose statement read the flag
-- just before a master raised it, and committed after the child's claim that followed, is seen
-- at that child's next claim, within one poll interval (docs/enqueue_wakeups.md).
--
-- A small table updated in place (wanted is in no index, so the updates are HOT); rows of a
-- supervisor go with it (unregister, prune). No change to pgq.jobs.
CREATE TABLE pgq.queue_wakeups (
    queue          text        NOT NULL,
    supervisor_id  text        NOT NULL,
    wanted         boolean     NOT NULL DEFAULT true,
    PRIMARY KEY (queue, supervisor_id)
) WITH (fillfactor = 50);

-- Takes every raised flag of the queue that no other transaction holds (SKIP LOCKED: never
-- waits) and, when it took one, NOTIFYs pgq_jobs with the queue, delivered at commit. Returns
-- whether it notified. The enqueues call it only after an index probe found a raised flag, so
-- the common case (flags down: children busy, or none listening) costs that probe alone, not an
-- UPDATE. PL/pgSQL, so its plans are kept for the session.
-- pgq.take_wakeups: its definition is sql/functions/take_wakeups.sql (applied after the migrations).

-- pgq.enqueue takes the flags too: it is redefined with them (and tenant, traceparent) in 0024.
