-- Who is running: supervisors and their children register here with a heartbeat, for
-- `pgq-supervisor status`. Rows of supervisors that stopped heartbeating are pruned.
-- Also the record of when each singleton maintenance task last ran, so that with several
-- supervisors on several hosts a task runs once per interval, not once per host.

CREATE TABLE pgq.supervisors (
    id            text        PRIMARY KEY,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    config        text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgq.workers (
    supervisor_id text        NOT NULL REFERENCES pgq.supervisors (id) ON DELETE CASCADE,
    worker_id     text        NOT NULL,
    pool          text        NOT NULL,
    slot          integer     NOT NULL,
    pid           integer     NOT NULL,
    state         text        NOT NULL,
    job_id        bigint,
    kind          text,
    job_started   timestamptz,
    spawned_at    timestamptz NOT NULL,
    PRIMARY KEY (supervisor_id, worker_id)
);

CREATE TABLE pgq.maintenance (
    task          text        PRIMARY KEY,
    last_run_at   timestamptz NOT NULL,
    run_by        text        NOT NULL
);
