-- Optional history of finished jobs: one compact row per completion or discard, written in
-- the same statement that deletes or discards the job. Partitioned by day on finished_at so the
-- purge drops whole partitions instead of deleting rows.

CREATE TABLE pgq.job_history (
    id           bigint      NOT NULL,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    outcome      text        NOT NULL,
    attempts     integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL,
    CONSTRAINT job_history_outcome_check CHECK (outcome IN ('completed', 'discarded'))
) PARTITION BY RANGE (finished_at);

-- Catches rows whose day has no partition yet (the supervisor creates them ahead of time).
CREATE TABLE pgq.job_history_default PARTITION OF pgq.job_history DEFAULT;

CREATE INDEX job_history_finished ON pgq.job_history (finished_at);

-- Creates the daily partitions from the day of `since` through `days_ahead` days later.
-- Rows already sitting in the default partition for a new day are moved into it, because
-- PostgreSQL refuses to attach a partition whose range the default partition already holds.
-- pgq.ensure_history_partitions: its definition is sql/functions/ensure_history_partitions.sql (applied after the migrations).

-- Drops the daily partitions whose whole day ended before `older_than`; returns how many.
-- pgq.drop_history_partitions: its definition is sql/functions/drop_history_partitions.sql (applied after the migrations).
