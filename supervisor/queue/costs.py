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

import contextlib
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import psycopg

from supervisor.queue import claim_builder
from supervisor.queue.literals import (
    bigint_array,
    nullable_int_array,
    nullable_text_array,
    text_array,
)
from supervisor.queue.sql_files import native_text, parse, sql_text

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


_getrusage = resource.getrusage
_SELF, _CHILDREN = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN


class _PeakMark:
    """The kernel's peak-RSS mark of this process, reset through /proc/self/clear_refs before
    each attempt and read after it.

    Read from getrusage's ``ru_maxrss`` where that is the mark itself: the kernel reports the
    larger of the mark and the peak the process's image had before its last exec
    (signal->maxrss, kept across exec and zero in a forked child, which starts a signal struct
    of its own). A child forked by the master has not exec'd, so the getrusage that reads the
    attempt's CPU reads its peak too. Elsewhere (a process started by exec: the in-process
    runners, a benchmark) the mark is read from /proc/self/status, a descriptor kept open: 11
    us a read against none (opening the file per attempt cost 30 us). Opened by the process
    that measures (after the fork: /proc/self is resolved when opened)."""

    def __init__(self) -> None:
        self.opened = False
        self.status = self.clear = -1
        # Set in a forked child (os.register_at_fork below): its ru_maxrss may be the mark.
        self.forked = False
        # Whether ru_maxrss is the mark in this process (checked once, when opened).
        self.in_rusage = False

    def after_fork(self) -> None:
        for fd in (self.status, self.clear):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.opened, self.forked, self.in_rusage = False, True, False
        self.status = self.clear = -1

    def _open(self) -> None:
        self.opened = True
        try:
            self.status = os.open(_STATUS, os.O_RDONLY)
            self.clear = os.open(_CLEAR_REFS, os.O_WRONLY)
        except OSError:
            self.status = self.clear = -1
            return
        if self.forked and self._reset():
            # The kernel's word checked once: just after a reset, ru_maxrss can only pass the
            # mark read after it if the pre-exec peak is what it reports.
            maxrss = _getrusage(_SELF).ru_maxrss * 1024
            mark = self._read_status()
            self.in_rusage = mark is not None and maxrss <= mark

    def _reset(self) -> bool:
        try:
            os.write(self.clear, b"5")
            return True
        except OSError:
            return False

    def reset(self) -> bool:
        """Reset the mark to the current RSS (Linux 4.0+); False where that cannot be done."""
        if not self.opened:
            self._open()
        if self.clear < 0:
            return False
        return self._reset()

    def read(self, maxrss: int) -> int | None:
        """The mark since the last reset, given the ru_maxrss of a getrusage made now (KiB)."""
        if self.in_rusage:
            return maxrss * 1024
        return self._read_status()

    def _read_status(self) -> int | None:
        try:
            text = os.pread(self.status, 4096, 0)
        except OSError:
            return None
        at = text.find(b"VmHWM:")
        if at < 0:
            return None
        return int(text[at + 6 : text.index(b"kB", at)]) * 1024


_MARK = _PeakMark()
os.register_at_fork(after_in_child=_MARK.after_fork)


class Meter:
    """Measures one attempt: ``start`` before the handler, ``stop`` after it. Inline, about 4
    us a pair in a forked child (the mark's reset and two getrusage pairs)."""

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
            own = _getrusage(_SELF)
            waited = _getrusage(_CHILDREN)
            self.cpu = own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime

    def stop(self) -> Cost:
        if self.shared:
            return Cost(max(time.thread_time() - self.cpu, 0.0), None)
        own = _getrusage(_SELF)
        waited = _getrusage(_CHILDREN)
        cpu = own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime - self.cpu
        if self.peak:
            return Cost(max(cpu, 0.0), _MARK.read(own.ru_maxrss))
        # No resettable mark: the process's lifetime peak is an upper bound, not the attempt's.
        return Cost(max(cpu, 0.0), own.ru_maxrss * 1024)


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


def columns(attempts: Sequence[Attempt]) -> dict[str, str]:
    """The attempts' costs as the eight ``cost_*`` parameters of sql/claim/completions.sql's
    ``spent``: the claim carries them with the outcomes (``jobs.claim_params``).

    Array literals sent as text with the statement's own ``$n`` placeholders: psycopg's list
    dumpers inspected every element of eight lists at every batch, and its ``%(name)s``
    conversion ran at every call (about 25 us a job's attempt at batch 100, more than the rest
    of writing the batch)."""
    return {
        "cost_ids": bigint_array(a.job_id for a in attempts),
        "cost_attempts": bigint_array(a.attempt for a in attempts),
        "cost_queues": text_array(a.queue for a in attempts),
        "cost_kinds": text_array(a.kind for a in attempts),
        "cost_tenants": nullable_text_array(a.tenant for a in attempts),
        "cost_outcomes": text_array(a.outcome for a in attempts),
        "cost_cpu": "{" + ",".join(repr(a.cost.cpu_seconds) for a in attempts) + "}",
        "cost_memory": nullable_int_array(a.cost.peak_memory for a in attempts),
    }


# The claim's cost parameters when it carries no attempt's cost.
NO_COSTS: dict[str, str] = columns(())


def record(conn: psycopg.Connection[Any], attempts: Sequence[Attempt]) -> None:
    """Insert the attempts' costs in a statement of their own (``spent`` alone): for outcomes
    written without a claim statement to carry them (a child flushing only retries and
    failures, pipelined with their settle)."""
    text, names = _record_statement()
    params = columns(attempts)
    psycopg.RawCursor(conn).execute(text, [params[name] for name in names])


@cache
def _record_statement() -> tuple[bytes, tuple[str, ...]]:
    text, names = native_text(claim_builder.piece("spent"))
    return text.encode("utf-8"), names


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
