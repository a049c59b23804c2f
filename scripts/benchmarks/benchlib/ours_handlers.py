"""Handlers for benchmarking our supervisor (imported by its children, from scripts/)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

from benchlib.common import DSN_ENV

_side: dict[int, psycopg.Connection[Any]] = {}


def noop(**_: Any) -> None:
    pass


def record_start(*, job: Any, **_: Any) -> None:
    """Stamps clock_timestamp() in bench_started as its first statement (pickup latency)."""
    pid = os.getpid()
    conn = _side.get(pid)
    if conn is None:  # opened lazily in the child, never across a fork
        conn = _side[pid] = psycopg.connect(os.environ[DSN_ENV], autocommit=True)
    conn.execute("INSERT INTO bench_started (job_id, at) VALUES (%s, clock_timestamp())", (job.id,))


def sleep(seconds: float = 0.0, **_: Any) -> None:
    """A handler waiting on I/O: sleeps, holding no CPU (scripts/benchmarks/scaling_bench.py)."""
    time.sleep(seconds)
