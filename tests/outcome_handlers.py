"""Handlers and reconcile hooks of the outcome tests (issue 23), run in real forked children
and in the reconciler's forked rounds. Each records what it did in the ledger table of
tests/handlers.py, so tests count runs and read answers."""

from __future__ import annotations

import ctypes
import json
import time
from typing import Any

from supervisor import JobContext, UnknownOutcome
from tests.handlers import _db, _record


def charge(seconds: float = 0.0, native: bool = False, *, job: JobContext, **_: Any) -> str:
    """An effect outside the database: recorded as 'charged' when it starts. The first attempt
    takes ``seconds`` (in native code with ``native``, where no signal interrupts it); later
    attempts finish at once."""
    _record(job, "started")
    if job.attempt == 1 and seconds:
        if native:
            ctypes.CDLL(None).sleep(int(seconds))
        else:
            time.sleep(seconds)
    _record(job, "finished")
    return "charged"


def ask_ledger(job: UnknownOutcome) -> str:
    """A reconcile hook: answers what the job's args say (``answer``), or raises with 'raise'.
    Records that it was asked."""
    _db().execute(
        "INSERT INTO test_ledger (job_id, attempt, pid, event) VALUES (%s, %s, 0, %s)",
        (job.id, job.attempt, f"asked:{job.idempotency_key}"),
    )
    answer = job.args.get("answer", "retry")
    if answer == "raise":
        raise ConnectionError("the provider is down")
    return str(answer)


def returns(value: Any = None, *, job: JobContext) -> Any:
    _record(job)
    return value


def returns_unserialisable(*, job: JobContext) -> Any:
    _record(job)
    return {"when": object()}


def member(
    n: int = 0,
    fail_times: int = 0,
    discard: bool = False,
    seconds: float = 0.0,
    *,
    job: JobContext,
) -> int:
    """A batch member: fails its first ``fail_times`` attempts, or is discarded, or sleeps."""
    from supervisor import Discard

    _record(job, "started")
    if discard:
        raise Discard("bad invoice")
    if job.attempt <= fail_times:
        raise RuntimeError(f"member {n} failed attempt {job.attempt}")
    if seconds:
        time.sleep(seconds)
    _record(job, "finished")
    return n


def then_record(*, job: JobContext, **_: Any) -> None:
    """A batch's then job: records the counts it sees, and when."""
    _record(job, "then:" + json.dumps(job.batch, sort_keys=True))
