"""A running job's progress: ``job.progress(fraction, message=None)`` from a handler, coalesced
in the child, kept in pgq.job_progress (docs/job-cost.md).

A handler may call it per page of a 20-minute export: a call only records the value (a few
hundred nanoseconds, scripts/benchmarks/progress_cost.py); the value reaches the database at
most once a WRITE_EVERY per job, through the child's main thread (a handler thread asks it,
as for lease_held()), and the last one once more when the attempt ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import psycopg

from supervisor.queue.queries import parse, sql_text

WRITE_EVERY = 1.0
MAX_MESSAGE = 200


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("progress.sql"))


def progress_query(name: str) -> str:
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/progress.sql") from None


@dataclass(frozen=True)
class Progress:
    job_id: int
    attempt: int
    fraction: float
    message: str | None
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "fraction": self.fraction,
            "message": self.message,
            "updated_at": self.updated_at.isoformat(),
        }


def checked(job_id: int, fraction: Any, message: Any) -> tuple[float, str | None]:
    """The value as kept; a fraction outside 0-1 (or not a number) raises, naming the job."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"job {job_id}: progress must be a number from 0 to 1, got {fraction!r}")
    if math.isnan(fraction) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"job {job_id}: progress must be from 0 to 1, got {fraction!r}")
    if message is not None:
        message = str(message)[:MAX_MESSAGE]
    return float(fraction), message


Writer = Callable[[Callable[[psycopg.Connection[Any]], bool]], Any]


class Reporter:
    """One attempt's progress, coalesced: ``report`` keeps the newest value and writes it
    through ``ask`` (the child's way to the database) when the last write is WRITE_EVERY old;
    ``finish`` writes what is left when the attempt ends."""

    def __init__(
        self,
        job_id: int,
        attempt: int,
        ask: Writer,
        *,
        every: float = WRITE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_id, self.attempt = job_id, attempt
        self.ask, self.every, self.clock = ask, every, clock
        self.pending: tuple[float, str | None] | None = None
        self.written_at: float | None = None
        self.writes = 0

    def report(self, fraction: Any, message: Any = None) -> None:
        self.pending = checked(self.job_id, fraction, message)
        now = self.clock()
        if self.written_at is None or now - self.written_at >= self.every:
            self._write(now)

    def finish(self) -> None:
        if self.pending is not None:
            self._write(self.clock())

    def _write(self, now: float) -> None:
        pending, self.pending = self.pending, None
        assert pending is not None
        fraction, message = pending
        self.written_at = now
        self.writes += 1
        self.ask(lambda conn: write(conn, self.job_id, self.attempt, fraction, message))


def write(
    conn: psycopg.Connection[Any], job_id: int, attempt: int, fraction: float, message: str | None
) -> bool:
    params = {"id": job_id, "attempt": attempt, "fraction": fraction, "message": message}
    conn.execute(progress_query("write_progress"), params)
    return True


def read(conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, Progress]:
    rows = conn.execute(progress_query("read_progress"), {"ids": list(ids)}).fetchall()
    return {row[0]: Progress(*row) for row in rows}


def purge_slice(conn: psycopg.Connection[Any], older_than: datetime, *, limit: int) -> int:
    params = {"older_than": older_than, "limit": limit}
    return conn.execute(progress_query("purge_progress"), params).rowcount
