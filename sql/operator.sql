-- Queries of the operator's surface shared by the command line and the dashboard (issue 35).

-- name: queue_in_use
-- Whether queue %(queue)s holds a job due or waiting to be claimed, or is paused already
-- (`queues pause`, `enqueue` and the dashboard's pause refuse a queue nothing knows: a typo).
-- The jobs_claim index, one probe.
SELECT EXISTS (SELECT 1 FROM pgq.jobs WHERE queue = %(queue)s AND state = 'available')
    OR EXISTS (SELECT 1 FROM pgq.queue_pauses WHERE queue = %(queue)s);

-- name: unhandled_kinds
-- Per queue and kind, jobs of a kind the config has no handler for (%(kinds)s are the kinds it
-- has): waiting (due, scheduled, running) and dead letters. Read from a bounded sample (the
-- first %(cap)s rows of each state, each through its partial index), never the whole table:
-- the counts are lower bounds, enough to say that something waits for a handler nobody has.
WITH sample AS (
    (SELECT queue, kind, false AS dead
     FROM pgq.jobs
     WHERE state = 'available'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, kind, false
     FROM pgq.jobs
     WHERE state = 'scheduled'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, kind, false
     FROM pgq.jobs
     WHERE state = 'running'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, kind, true
     FROM pgq.jobs
     WHERE state = 'discarded'
     ORDER BY finished_at DESC
     LIMIT %(cap)s)
)
SELECT
    queue,
    kind,
    count(*) FILTER (WHERE NOT dead) AS waiting,
    count(*) FILTER (WHERE dead) AS dead
FROM sample
WHERE kind <> ALL(%(kinds)s::text[])
GROUP BY queue, kind
ORDER BY queue, kind;

-- name: purge_dead_letters
-- Deletes up to %(limit)s dead letters (state discarded, never cancelled jobs: a cancelled job
-- is not a dead letter) that finished before %(older_than)s; run in a loop (`dlq purge`, the
-- dashboard's purge). %(kind)s and %(queue)s narrow it when given; null means any. The
-- jobs_discarded index, in finish order.
DELETE FROM pgq.jobs
WHERE id IN (
    SELECT id
    FROM pgq.jobs
    WHERE state = 'discarded'
      AND finished_at < %(older_than)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: schedule_paused
-- Whether schedule %(name)s is paused (its tick passes without a job). A primary key probe.
SELECT EXISTS (SELECT 1 FROM pgq.schedule_pauses WHERE name = %(name)s);

-- name: pause_schedule
-- Pauses schedule %(name)s; a row only when it was not paused already.
INSERT INTO pgq.schedule_pauses (name, paused_by)
VALUES (%(name)s, %(by)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: resume_schedule
-- Resumes schedule %(name)s; a row only when it was paused.
DELETE FROM pgq.schedule_pauses
WHERE name = %(name)s
RETURNING name;

-- name: paused_schedules
-- Every paused schedule, for the schedules page and status.
SELECT name, paused_at, paused_by
FROM pgq.schedule_pauses
ORDER BY name;
