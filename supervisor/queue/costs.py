"""What each attempt cost: CPU seconds and peak memory, measured around the handler in the child
and kept per attempt in pgq.attempt_costs (docs/job-cost.md).

An inline child runs one job at a time, so the process's own usage around the attempt is the
attempt's: CPU from getrusage (the child and the subprocesses it waited for), and the peak
resident set from the kernel's high-water mark (VmHWM), reset before each attempt through
/proc/self/clear_refs. A threaded child's jobs share a process: each attempt's CPU is its
handler thread's (time.thread_time: not the subprocesses it started, not native threads of its
own), and its memory cannot be told apart from its neighbours' (None).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import psycopg

from supervisor.queue.queries import parse, sql_text

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("costs.sql"))


def cost_query(name: str) -> str:
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/costs.sql") from None


@dataclass(frozen=True)
class Cost:
    cpu_seconds: float
    peak_memory: int | None  # bytes


def _cpu_of_process() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


class _PeakMark:
    """The kernel's peak-RSS mark of this process, through descriptors kept open: opening
    /proc/self/status per attempt cost 30 us, a pread of a kept one a third of that. Opened by
    the process that measures (after the fork: /proc/self is resolved when opened)."""

    def __init__(self) -> None:
        self.pid = -1
        self.status = self.clear = -1

    def _open(self) -> None:
        self.pid = os.getpid()
        try:
            self.status = os.open(_STATUS, os.O_RDONLY)
            self.clear = os.open(_CLEAR_REFS, os.O_WRONLY)
        except OSError:
            self.status = self.clear = -1

    def reset(self) -> bool:
        """Reset the mark to the current RSS (Linux 4.0+); False where that cannot be done."""
        if self.pid != os.getpid():
            self._open()
        if self.clear < 0:
            return False
        try:
            os.write(self.clear, b"5")
            return True
        except OSError:
            return False

    def read(self) -> int | None:
        try:
            text = os.pread(self.status, 4096, 0)
        except OSError:
            return None
        at = text.find(b"VmHWM:")
        if at < 0:
            return None
        return int(text[at + 6 : text.index(b"kB", at)]) * 1024


_MARK = _PeakMark()


class Meter:
    """Measures one attempt: ``start`` before the handler, ``stop`` after it."""

    __slots__ = ("cpu", "peak", "shared")

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared  # a threaded child: other jobs run beside this one
        self.cpu = 0.0
        self.peak = False

    def start(self) -> None:
        if self.shared:
            self.cpu = time.thread_time()
        else:
            self.peak = _MARK.reset()
            self.cpu = _cpu_of_process()

    def stop(self) -> Cost:
        if self.shared:
            return Cost(max(time.thread_time() - self.cpu, 0.0), None)
        cpu = max(_cpu_of_process() - self.cpu, 0.0)
        if self.peak:
            return Cost(cpu, _MARK.read())
        # No resettable mark: the process's lifetime peak is an upper bound, not the attempt's.
        return Cost(cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


@dataclass(frozen=True)
class Attempt:
    """One finished attempt's cost, as the completer writes it."""

    job_id: int
    attempt: int
    queue: str
    kind: str
    tenant: str | None
    outcome: str
    cost: Cost


def record(conn: psycopg.Connection[Any], attempts: Sequence[Attempt]) -> None:
    conn.execute(
        cost_query("record_costs"),
        {
            "ids": [a.job_id for a in attempts],
            "attempts": [a.attempt for a in attempts],
            "queues": [a.queue for a in attempts],
            "kinds": [a.kind for a in attempts],
            "tenants": [a.tenant for a in attempts],
            "outcomes": [a.outcome for a in attempts],
            "cpu": [a.cost.cpu_seconds for a in attempts],
            "memory": [a.cost.peak_memory for a in attempts],
        },
    )


@dataclass(frozen=True)
class AttemptCost:
    attempt: int
    outcome: str
    cpu_seconds: float
    peak_memory: int | None
    finished_at: datetime


def job_costs(conn: psycopg.Connection[Any], job_id: int) -> list[AttemptCost]:
    rows = conn.execute(cost_query("job_costs"), {"id": job_id}).fetchall()
    return [AttemptCost(*row) for row in rows]


def by_kind(
    conn: psycopg.Connection[Any], seconds: float = 3600, limit: int = 20
) -> list[dict[str, Any]]:
    rows = conn.execute(cost_query("cost_by_kind"), {"seconds": seconds, "limit": limit})
    return [
        {"kind": k, "attempts": int(n), "cpu_seconds": float(cpu), "peak_memory": mem}
        for k, n, cpu, mem in rows.fetchall()
    ]


def by_tenant(
    conn: psycopg.Connection[Any], seconds: float = 3600, limit: int = 20
) -> list[dict[str, Any]]:
    rows = conn.execute(cost_query("cost_by_tenant"), {"seconds": seconds, "limit": limit})
    return [
        {"queue": q, "tenant": t, "attempts": int(n), "cpu_seconds": float(cpu)}
        for q, t, n, cpu in rows.fetchall()
    ]


def purge_slice(conn: psycopg.Connection[Any], older_than: datetime, *, limit: int) -> int:
    params = {"older_than": older_than, "limit": limit}
    return conn.execute(cost_query("purge_costs"), params).rowcount
