"""The rolling-upgrade drill's job and producer, importable by both releases (the old one runs
from a git worktree of the previous release, with this folder on its PYTHONPATH).

    python scripts/drills/upgrade_drill_jobs.py produce RATE SECONDS   (PGQ_DSN names the database)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psycopg

_conn: dict[int, psycopg.Connection[Any]] = {}

LEDGER_SQL = """
CREATE TABLE IF NOT EXISTS drill_enqueued (job_id bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS drill_ledger (
    job_id bigint NOT NULL, release text NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""


def record(*, job: Any, **_: Any) -> None:
    """Each execution: which job, on which release (PGQ_DRILL_RELEASE), when (database clock)."""
    pid = os.getpid()
    if pid not in _conn or _conn[pid].closed:
        _conn[pid] = psycopg.connect(os.environ["PGQ_DSN"], autocommit=True)
    _conn[pid].execute(
        "INSERT INTO drill_ledger (job_id, release, pid) VALUES (%s, %s, %s)",
        (job.id, os.environ.get("PGQ_DRILL_RELEASE", "?"), pid),
    )


def produce(rate: float, seconds: float) -> int:
    """Enqueue ``rate`` jobs a second for ``seconds`` with this release's library; each job's
    enqueue time (database clock) is written in the same transaction."""
    from supervisor import enqueue

    made = 0
    start = time.monotonic()
    with psycopg.connect(os.environ["PGQ_DSN"]) as conn:
        while time.monotonic() - start < seconds:
            with conn.transaction():
                job_id = enqueue(conn, "drill", {"n": made})
                conn.execute("INSERT INTO drill_enqueued VALUES (%s, clock_timestamp())", (job_id,))
            made += 1
            time.sleep(max(0.0, start + made / rate - time.monotonic()))
    return made


if __name__ == "__main__" and sys.argv[1:2] == ["produce"]:
    print(produce(float(sys.argv[2]), float(sys.argv[3])))
