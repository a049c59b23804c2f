"""The handler that scripts/drills/chaos.py's jobs run, inside the supervisor's forked children.

Each execution records itself in chaos_ledger first, on a connection of its own (one per
process and thread, opened after the fork), in its own transaction: (job id, lease id) is the
execution, since the claim's fencing token is never reused. Completion is not recorded here:
a trigger records the deletion of the job row, which only the supervisor's fenced completion
does, so a handler cannot fake it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

import psycopg
import psycopg.errors

from supervisor import JobContext

LEDGER_SQL = """
CREATE TABLE IF NOT EXISTS chaos_ledger (
    job_id       bigint      NOT NULL,
    lease_id     bigint      NOT NULL,
    attempt      integer     NOT NULL,
    pid          integer     NOT NULL,
    planned_fail boolean     NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, lease_id)
);
CREATE TABLE IF NOT EXISTS chaos_completed (
    job_id    bigint      NOT NULL,
    lease_id  bigint,
    attempts  integer     NOT NULL,
    state     text        NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION chaos_record_completion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_completed (job_id, lease_id, attempts, state)
    VALUES (OLD.id, OLD.lease_id, OLD.attempts, OLD.state);
    RETURN OLD;
END
$$;
DROP TRIGGER IF EXISTS chaos_completion ON pgq.jobs;
CREATE TRIGGER chaos_completion AFTER DELETE ON pgq.jobs
FOR EACH ROW EXECUTE FUNCTION chaos_record_completion();
"""

# A database outage (a restart, a kill -9 and recovery) lasts a few seconds; the ledger write
# waits that long before the execution counts as failed.
RECORD_PATIENCE = 20.0

_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "pid", None) != os.getpid():
        conn = psycopg.connect(
            os.environ["PGQ_DSN"], autocommit=True, application_name="chaos-handler"
        )
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def _record(job: JobContext, planned_fail: bool) -> None:
    """Write the ledger row, reconnecting through outages. ON CONFLICT: a retry after a lost
    acknowledgement must not count one execution twice."""
    deadline = time.monotonic() + RECORD_PATIENCE
    while True:
        try:
            _connection().execute(
                "INSERT INTO chaos_ledger (job_id, lease_id, attempt, pid, planned_fail) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (job.id, job.lease_id, job.attempt, os.getpid(), planned_fail),
            )
            return
        except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction):
            # Down, or read-only for a while (a failover drill): wait as for an outage.
            conn = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
            _local.conn = None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def work(
    *, job: JobContext, ms: float = 0.0, mode: str = "ok", spawn: float = 0.0, hang: float = 0.0
) -> None:
    """mode "ok" succeeds, "flaky" fails its first attempt, "fail" always fails, "hang" hangs
    its first attempt for ``hang`` seconds (past its kind's timeout); spawn runs a subprocess
    (a renderer's helper) that a kill must not leave behind."""
    planned_fail = mode == "fail" or (mode in ("flaky", "hang") and job.attempt == 1)
    _record(job, planned_fail)
    if mode == "hang" and planned_fail:
        time.sleep(hang)
    if spawn:
        subprocess.run(["sleep", str(spawn)], check=True)
    if ms:
        time.sleep(ms / 1000)
    if planned_fail:
        raise RuntimeError(f"planned failure ({mode}) of job {job.id}, attempt {job.attempt}")
