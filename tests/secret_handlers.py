"""Handlers of the encrypted-argument tests: each records the args it was given (as JSON, with
its pid and thread) in test_secrets on its own connection, so a test sees exactly what a
handler saw."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import psycopg

from supervisor import JobContext, Retry

SECRETS = """
CREATE TABLE IF NOT EXISTS test_secrets (
    job_id   bigint  NOT NULL,
    attempt  integer NOT NULL,
    args     text    NOT NULL,
    pid      integer NOT NULL,
    thread   text    NOT NULL
)
"""

_conn: dict[int, psycopg.Connection[Any]] = {}


def _db() -> psycopg.Connection[Any]:
    pid = os.getpid()
    if pid not in _conn or _conn[pid].closed:
        _conn[pid] = psycopg.connect(os.environ["PGQ_DSN"], autocommit=True)
    return _conn[pid]


def see(*, job: JobContext, **args: Any) -> None:
    """Record the args; fail the first attempt when asked (a retry sees them again)."""
    _db().execute(
        "INSERT INTO test_secrets (job_id, attempt, args, pid, thread) VALUES (%s, %s, %s, %s, %s)",
        (
            job.id,
            job.attempt,
            json.dumps(args, sort_keys=True),
            os.getpid(),
            threading.current_thread().name,
        ),
    )
    if args.get("fail_first") and job.attempt == 1:
        raise Retry(0.1)


def quote(card: str, *, job: JobContext, **_: Any) -> None:
    """A handler whose error quotes its secret argument."""
    raise ValueError(f"card {card} was declined")
