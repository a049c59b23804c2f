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
    # Monotonic-clock deadline from the kind's timeout; None when the kind has no timeout.
    deadline: float | None = None
    _check_lease: Callable[[], bool] | None = field(default=None, repr=False)
    _checked_at: float = field(default=float("-inf"), repr=False)
    _held: bool = field(default=True, repr=False)
    _check_cancel: Callable[[], bool] | None = field(default=None, repr=False)
    _cancel_checked_at: float = field(default=float("-inf"), repr=False)
    # Set once cancelled() returned True: the supervisor then records the job as cancelled
    # whatever the handler does next.
    cancel_seen: bool = field(default=False, repr=False)

    @property
    def idempotency_key(self) -> str:
        return f"pgq-job-{self.id}"

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def time_left(self) -> float | None:
        """Seconds until the kind's timeout kills this job, or None without a timeout."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def lease_held(self) -> bool:
        """Whether this worker still owns the job. Once False, stop committing progress: the
        job has been given to someone else and this attempt's result will be dropped."""
        if not self._held or self._check_lease is None:
            return self._held
        now = time.monotonic()
        if now - self._checked_at >= LEASE_CHECK_TTL:
            self._held = self._check_lease()
            self._checked_at = now
        return self._held

    def cancelled(self) -> bool:
        """Whether someone cancelled this job (``jobs cancel``, ``supervisor.cancel``).

        A handler on a threaded pool should check it between steps and return (or raise) once
        it is True: the job then ends ``cancelled`` and is not retried. In a single-threaded pool
        the master stops the child anyway, within about a second. Asks the database at most
        once a second.
        """
        if self.cancel_seen or self._check_cancel is None:
            return self.cancel_seen
        now = time.monotonic()
        if now - self._cancel_checked_at >= LEASE_CHECK_TTL:
            self.cancel_seen = self._check_cancel()
            self._cancel_checked_at = now
        return self.cancel_seen
