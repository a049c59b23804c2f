-- A paused schedule has a row here (the dashboard's schedules page, issue 35). Its ticks still
-- pass (recorded in pgq.schedules, so resuming does not enqueue the ticks missed meanwhile),
-- but none enqueues a job; every supervisor reads it at each tick, so the pause holds
-- fleet-wide and outlives restarts, like pgq.queue_pauses.
CREATE TABLE pgq.schedule_pauses (
    name        text        PRIMARY KEY,
    paused_at   timestamptz NOT NULL DEFAULT now(),
    paused_by   text        NOT NULL DEFAULT current_user
);
