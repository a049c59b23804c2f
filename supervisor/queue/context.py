"""What a running handler may know about its job.

A handler asks for it by declaring a keyword parameter named ``job``::

    def charge_card(order_id: int, *, job: JobContext) -> None:
        payments.charge(order_id, idempotency_key=job.idempotency_key)

The job id is stable across attempts, so it is the key to hand to outside systems (payment
providers, mail APIs) that deduplicate: a retry after a crash then repeats nothing. The
database fence protects only the database; outside effects need this key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# How long a lease check is trusted before asking the database again.
LEASE_CHECK_TTL = 1.0


@dataclass
class JobContext:
    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    lease_id: int
    worker: str
    created_at: datetime
    # The W3C trace context the job was enqueued under (pgq.enqueue's traceparent, or the
    # enqueuer's current OpenTelemetry span), or None.
    traceparent: str | None = None
    # Monotonic-clock deadline from the kind's timeout; None when the kind has no timeout.
    deadline: float | None = None
    # A batch's `then` job sees how its batch ended: {"id", "total", "completed", "discarded",
    # "cancelled"}; None for every other job.
    batch: dict[str, Any] | None = None
    # A workflow step sees its workflow's id and its parents (``Parent``: id, kind, state,
    # result), in the order they were added; None and [] for a job outside workflows. The claim
    # hands both over in the job's `batch` column, written when the step was released
    # (pgq.workflow_ended), so the claim itself reads nothing more for them.
    workflow: int | None = None
    parents: list[Parent] = field(default_factory=list)
    # Each check answers True or False, or None when it could not be made (the database was
    # away, the child's main thread too busy to ask): the last known answer then stands.
    _check_lease: Callable[[], bool | None] | None = field(default=None, repr=False)
    _check_cancel: Callable[[], bool | None] | None = field(default=None, repr=False)
    # Where progress goes (supervisor.queue.progress.Reporter.report); None: nowhere.
    _report_progress: Callable[[float, str | None], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._lease = _Latch(value=True)
        self._cancel = _Latch(value=False)
        if self.batch is not None and "parents" in self.batch:
            self.workflow = self.batch.get("workflow")
            self.parents = [Parent.of(p) for p in self.batch["parents"]]
            self.batch = None

    @property
    def cancel_seen(self) -> bool:
        """True once cancelled() returned True: the supervisor then records the job as
        cancelled whatever the handler does next."""
        return self._cancel.value

    @property
    def lease_lost(self) -> bool:
        """True once lease_held() returned False: whatever the handler does next, this
        attempt's result is dropped."""
        return not self._lease.value

    @property
    def idempotency_key(self) -> str:
        return f"pgq-job-{self.id}"

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Say how far the job is (0 to 1) and, optionally, at what: shown by `jobs show`
        and the dashboard while it runs, and kept after it. Cheap enough to call per page:
        the value reaches the database at most about once a second. A fraction outside 0-1
        raises ValueError."""
        if self._report_progress is not None:
            self._report_progress(fraction, message)

    def time_left(self) -> float | None:
        """Seconds until the kind's timeout kills this job, or None without a timeout."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def lease_held(self) -> bool:
        """Whether this worker still owns the job. False only when the database said so (the
        job was given to someone else, rescued, or its lease ran out); a check that could not
        be made keeps the last answer and is asked again at the next call. Once False, stop:
        this attempt's result is dropped whatever the handler returns, and the job is the new
        owner's (or runs again when nobody holds it). Asks the database at most once a second.
        """
        return self._lease.read(self._check_lease)

    def cancelled(self) -> bool:
        """Whether someone cancelled this job (``jobs cancel``, ``supervisor.cancel``).

        A handler on a threaded pool should check it between steps and return (or raise) once
        it is True: the job then ends ``cancelled`` and is not retried, whatever the handler
        returns or raises. In a single-threaded pool the master stops the child anyway, within
        about a second. A check that could not be made counts as no cancel and is asked again.
        Asks the database at most once a second.
        """
        return self._cancel.read(self._check_cancel)


@dataclass(frozen=True)
class Parent:
    """A workflow step's parent as it ended: 'completed' (``result`` is what its handler
    returned, None when nothing), 'discarded' or 'cancelled' (only an
    ``on_parent_failure="run"`` step sees those)."""

    id: int
    kind: str
    state: str
    result: Any = None

    @classmethod
    def of(cls, item: dict[str, Any]) -> Parent:
        return cls(int(item["id"]), str(item["kind"]), str(item["state"]), item.get("result"))


@dataclass
class _Latch:
    """A database check asked at most once per LEASE_CHECK_TTL, whose answer, once it moves
    away from where it started (a lease lost, a cancel seen), stays there. A check that could
    not be made (None) changes nothing, and the next read asks again."""

    value: bool
    checked_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.start = self.value

    def read(self, check: Callable[[], bool | None] | None) -> bool:
        if self.value != self.start or check is None:
            return self.value
        now = time.monotonic()
        if now - self.checked_at >= LEASE_CHECK_TTL:
            answer = check()
            if answer is not None:
                self.value, self.checked_at = answer, now
        return self.value
