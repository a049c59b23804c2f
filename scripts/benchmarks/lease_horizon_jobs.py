"""Handlers for scripts/benchmarks/lease_horizon_run.py: a no-op for the stream, and a job
that runs longer than its lease and writes when each attempt starts and ends (a second run
shows)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

_conn: dict[int, psycopg.Connection[Any]] = {}


def _db() -> psycopg.Connection[Any]:
    pid = os.getpid()
    if pid not in _conn or _conn[pid].closed:
        _conn[pid] = psycopg.connect(os.environ["PGQ_DSN"], autocommit=True)
    return _conn[pid]


def _note(job: Any, event: str) -> None:
    _db().execute(
        "INSERT INTO bench_long_runs (job_id, attempt, pid, event) VALUES (%s, %s, %s, %s)",
        (job.id, job.attempt, os.getpid(), event),
    )


def noop(**_: Any) -> None:
    pass


def long(seconds: float, *, job: Any) -> None:
    """Sleeps in steps, so a cancel (job.cancelled() on a threaded pool, a stop otherwise)
    ends it."""
    _note(job, "started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.5)
    _note(job, "finished")
