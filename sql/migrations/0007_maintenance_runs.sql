-- A log of every singleton maintenance run (rescue, purge, vacuum, and any later duty): which
-- supervisor ran it and when, so a fleet's duties can be audited from the database: once per
-- interval across every host, and moving to another host when its host dies. The purge keeps
-- seven days of it.

CREATE TABLE pgq.maintenance_runs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task        text        NOT NULL,
    run_by      text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX maintenance_runs_started_at ON pgq.maintenance_runs (started_at);
