"""Handlers for benchmarking our supervisor (imported by its children, from scripts/)."""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

import psycopg

from benchlib.common import DSN_ENV

_side: dict[int, psycopg.Connection[Any]] = {}


def noop(**_: Any) -> None:
    pass


@cache
def _payload(items: int) -> str:
    return json.dumps([{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(items)])


def parse_payload(items: int = 5000, **_: Any) -> int:
    """A handler that allocates as real ones do: it parses a JSON document of ``items`` records
    (a webhook's payload, about 3 objects a record, alive until it returns), so the child's
    garbage collector runs its full collections (scripts/benchmarks/child_cpu_ab.py --kind)."""
    return sum(len(record["tags"]) for record in json.loads(_payload(items)))


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
