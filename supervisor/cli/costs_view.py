"""What each attempt of a job cost and how far it got, as `jobs show` prints them
(docs/job-cost.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from supervisor.queue.costs import AttemptCost
from supervisor.queue.progress import Progress
from supervisor.views.text import age, iso, safe


def to_json(attempts: list[AttemptCost]) -> dict[str, Any]:
    """``cpu_seconds`` and ``peak_memory`` of the last finished attempt (None before any), and
    every attempt's under ``costs``."""
    last = attempts[-1] if attempts else None
    return {
        "cpu_seconds": last.cpu_seconds if last else None,
        "peak_memory": last.peak_memory if last else None,
        "costs": [
            {
                "attempt": a.attempt,
                "outcome": a.outcome,
                "cpu_seconds": a.cpu_seconds,
                "peak_memory": a.peak_memory,
                "finished_at": iso(a.finished_at),
            }
            for a in attempts
        ],
    }


def lines(attempts: list[AttemptCost]) -> list[str]:
    if not attempts:
        return []
    found = ["cost (per attempt):"]
    for a in attempts:
        memory = f"{a.peak_memory / 2**20:.1f} MiB peak" if a.peak_memory is not None else "-"
        found.append(f"  attempt {a.attempt} {a.outcome}: {a.cpu_seconds:.3f}s CPU, {memory}")
    return found


def progress_lines(said: Progress | None, now: datetime) -> list[str]:
    if said is None:
        return []
    message = f" ({safe(said.message)})" if said.message else ""
    ago = age(max((now - said.updated_at).total_seconds(), 0.0))
    return [f"  progress    {said.fraction:.0%}{message}, attempt {said.attempt}, {ago} ago"]
