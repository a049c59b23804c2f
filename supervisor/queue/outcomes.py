"""What a handler can say about its job, and what each outcome writes.

A handler that returns normally completed its job. It may instead raise one of the typed
outcomes below; anything else it raises is a failure, retried with capped exponential backoff
and jitter until the job runs out of attempts and is discarded (the dead-letter queue).
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from supervisor.queue.enqueue import _JSON_NUL  # the one test for a NUL in JSON text
from supervisor.queue.job import Job

MAX_ERROR_CHARS = 8000

BACKOFF_BASE = 2.0
BACKOFF_CAP = 3600.0


def _seconds(delay: float | timedelta) -> float:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if seconds < 0:
        raise ValueError(f"a delay must be zero or more seconds, got {delay!r}")
    return seconds


class Outcome(Exception):
    """Base of the typed outcomes a handler may raise."""


class Retry(Outcome):
    """Run the job again after ``delay`` seconds; spends the attempt, like a failure."""

    def __init__(self, delay: float | timedelta, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = _seconds(delay)
        self.reason = reason


class Discard(Outcome):
    """Give up on the job now: it goes to the dead-letter queue with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(Outcome):
    """Run the job later without spending an attempt (waiting on something, not failing)."""

    def __init__(self, delay: float | timedelta) -> None:
        super().__init__(f"snoozed for {delay}")
        self.delay = _seconds(delay)


def backoff_delay(
    attempt: int,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before attempt ``attempt + 1``: base * 2^(attempt-1), capped, jittered.

    The jitter draws from [half, all] of the step so a burst of failures spreads out instead of
    retrying in lockstep, while the wait still grows with every attempt.
    """
    step = min(base * 2.0 ** max(attempt - 1, 0), cap)
    return step * (rng or random).uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Settlement:
    """A fenced write that ends a claim other than by success (see the settle query)."""

    job: Job
    # 'available' (or 'scheduled' when delayed), 'discarded', 'cancelled' or 'unknown'
    state: str
    delay: float | None  # None keeps run_at
    refund: int  # 1 gives the attempt back
    error: str | None  # None keeps the previous last_error
    # The attempt stopped because its lease was lost: its result is dropped (the fence keeps
    # the new owner's job as it is; with no new owner, the job is given back).
    lease_lost: bool = False

    @property
    def scheduled(self) -> bool:
        """Whether the job waits for a later run_at (the settle query writes 'scheduled')."""
        return self.state == "available" and self.delay is not None and self.delay > 0

    @property
    def label(self) -> str:
        if self.lease_lost:
            return "lost"
        if self.state in ("discarded", "cancelled", "unknown"):
            return self.state
        if self.refund:
            return "released" if self.delay is None else "snoozed"
        return "retried"


def release(job: Job) -> Settlement:
    """Give back a claimed job that never started, without spending its attempt."""
    return Settlement(job, "available", None, 1, None)


def lease_lost(job: Job) -> Settlement:
    """An attempt that went on after lease_held() said False: nothing it did is recorded. The
    fenced write does nothing when another worker holds the job; when nobody does (the lease
    ran out, no rescue yet), the job is given back without spending its attempt."""
    reason = f"attempt {job.attempts} stopped: lease_held() said its lease was lost"
    return Settlement(job, "available", None, 1, reason, lease_lost=True)


def snooze(job: Job, delay: float | timedelta) -> Settlement:
    return Settlement(job, "available", _seconds(delay), 1, None)


def discard(job: Job, reason: str) -> Settlement:
    return Settlement(job, "discarded", None, 0, clip_error(reason))


UNKNOWN_PREFIX = "outcome unknown (effects: external): "


def unknown(job: Job, reason: str) -> Settlement:
    """An attempt of a kind with effects outside the database that ended without an outcome
    (it timed out): the job waits in 'unknown' for its reconcile hook or an operator, its
    attempt spent, due for the hook at once."""
    return Settlement(job, "unknown", 0.0, 0, clip_error(UNKNOWN_PREFIX + reason))


def cancelled(job: Job, reason: str, *, started: bool = True) -> Settlement:
    """End a job someone cancelled; one that never started gets its attempt back."""
    return Settlement(job, "cancelled", None, 0 if started else 1, clip_error(reason))


def retry(
    job: Job, delay: float | timedelta, error: str, *, max_attempts: int | None = None
) -> Settlement:
    """Run again after ``delay``, or discard with ``error`` when the attempts are spent."""
    limit = max_attempts if max_attempts is not None else job.max_attempts
    if job.attempts >= limit:
        # rstrip: on a traceback's last line, not on a line of its own after the final newline.
        note = f" (attempt {job.attempts} of {limit}: no attempts left)"
        return discard(job, error.rstrip() + note)
    return Settlement(job, "available", _seconds(delay), 0, clip_error(error))


def failure(
    job: Job,
    error: str,
    *,
    max_attempts: int | None = None,
    backoff_base: float = BACKOFF_BASE,
    backoff_cap: float = BACKOFF_CAP,
) -> Settlement:
    """A failed attempt: retry after the backoff for this attempt, or discard when spent."""
    delay = backoff_delay(job.attempts, base=backoff_base, cap=backoff_cap)
    return retry(job, delay, error, max_attempts=max_attempts)


def describe_exception(exc: BaseException) -> str:
    """The error text kept in last_error: the exception and a trimmed traceback."""
    return clip_error("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def clip_error(text: str) -> str:
    """At most MAX_ERROR_CHARS: the start and, above all, the end, where a traceback names the
    exception and its message."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    marker = "\n...\n"
    head = MAX_ERROR_CHARS // 4
    return text[:head] + marker + text[-(MAX_ERROR_CHARS - head - len(marker)) :]


def settlement_for(
    job: Job,
    exc: BaseException,
    *,
    max_attempts: int | None = None,
    backoff_base: float = BACKOFF_BASE,
    backoff_cap: float = BACKOFF_CAP,
) -> Settlement:
    """Map what a handler raised to the write that records it."""
    if isinstance(exc, Snooze):
        return snooze(job, exc.delay)
    if isinstance(exc, Discard):
        return discard(job, f"discarded by handler: {exc.reason}")
    if isinstance(exc, Retry):
        return retry(job, exc.delay, f"retry requested: {exc.reason}", max_attempts=max_attempts)
    return failure(
        job,
        describe_exception(exc),
        max_attempts=max_attempts,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
    )


def of_attempt(
    job: Job,
    exc: BaseException | None,
    *,
    cancel_seen: bool,
    lease_lost_seen: bool,
    max_attempts: int | None = None,
    backoff_base: float = BACKOFF_BASE,
    backoff_cap: float = BACKOFF_CAP,
) -> Settlement | None:
    """What one attempt of a handler is recorded as: None (completed), or its settlement.

    The one mapping, shared by the workers and supervisor.testing. A handler that saw
    ``cancelled()`` True ends cancelled, whether it returned or raised (even on its last
    attempt); one that saw ``lease_held()`` False has its result dropped; otherwise a return
    completes the job and what it raised decides (settlement_for).
    """
    if cancel_seen:
        return cancelled(job, "cancelled while running; the handler stopped")
    if lease_lost_seen:
        return lease_lost(job)
    if exc is None:
        return None
    return settlement_for(
        job, exc, max_attempts=max_attempts, backoff_base=backoff_base, backoff_cap=backoff_cap
    )


DEFAULT_RESULT_LIMIT = 64 * 1024  # results.max_size's default


@dataclass(frozen=True)
class Encoded:
    text: str


def result_problem(value: Any, limit: int) -> Encoded | str:
    """A handler's return value as JSON text, or what keeps it from being kept."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"it is not JSON-serialisable ({type(exc).__name__}: {exc}); return plain JSON"
    if _JSON_NUL.search(text):
        return "it contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store"
    size = len(text.encode("utf-8"))
    if size > limit:
        return (
            f"it takes {size} bytes as JSON, over the limit of {limit} (results.max_size); "
            "keep large outputs elsewhere and return a reference"
        )
    return Encoded(text)
