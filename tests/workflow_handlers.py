"""Handlers of the workflow lifecycle tests: each run is written to the ledger (tests/handlers),
with what the step saw of its parents, so a test counts runs and checks the order."""

from __future__ import annotations

import time
from typing import Any

from supervisor import JobContext
from tests.handlers import _record


def step(seconds: float = 0.0, *, job: JobContext, **_: Any) -> dict[str, int]:
    _record(job, "started")
    time.sleep(seconds)
    _record(job, "finished")
    return {"step": job.id}


def join(*, job: JobContext, **_: Any) -> dict[str, int]:
    """Records how many parents completed and how many of their results it received."""
    completed = sum(1 for p in job.parents if p.state == "completed")
    results = sum(1 for p in job.parents if p.result == {"step": p.id})
    _record(job, f"join:{len(job.parents)}:{completed}:{results}")
    return {"step": job.id}
