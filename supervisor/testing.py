"""Helpers for an application's own tests: run a handler inline, or drain a test database.

``run_inline`` calls one handler in the test's process with a real ``JobContext`` and says what
the supervisor would do with the result (completed, retry, discard, snooze, cancelled, or lost:
dropped, since it went on after ``lease_held()`` said False), using the workers' own mapping.
``drain`` runs every due job of a database through the given handlers, claiming and settling
them exactly as a worker does (fenced writes, retries with backoff, dead letters), until nothing
is due::

    def test_order_sends_its_webhook(conn):
        create_order(conn, ...)                       # enqueues deliver_webhook
        report = drain(conn, {"deliver_webhook": deliver_webhook})
        assert report.completed == 1

Nothing here forks or starts threads; handlers run one after another in the caller's thread.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import psycopg

from supervisor.child.weights import TenantRotation
from supervisor.config.handlers import argument_mismatch, wants_context
from supervisor.crypto.opening import opened
from supervisor.queue import control, outcomes, scheduled
from supervisor.queue import jobs as jobs_api
from supervisor.queue.context import JobContext, Parent
from supervisor.queue.job import Job
from supervisor.queue.queries import query
from supervisor.queue.secrets import unwrapped

Status = Literal["completed", "retry", "discard", "snooze", "cancelled", "lost"]
_STATUS: dict[str, Status] = {
    "retried": "retry",
    "discarded": "discard",
    "snoozed": "snooze",
    "released": "snooze",
    "cancelled": "cancelled",
    "lost": "lost",  # it went on after lease_held() said False: its result is dropped
}


@dataclass(frozen=True)
class Outcome:
    """What became of one run of a handler, in the supervisor's terms."""

    status: Status
    delay: float | None = None  # seconds until the next attempt (retry, snooze)
    error: str | None = None  # what would be kept in last_error
    exception: BaseException | None = None  # what the handler raised, if anything
    result: Any = None  # what a completed handler returned, as it would be kept (decoded JSON)

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def _outcome(
    settlement: outcomes.Settlement | None, exc: BaseException | None, kept: str | None = None
) -> Outcome:
    if settlement is None:
        return Outcome("completed", result=json.loads(kept) if kept is not None else None)
    return Outcome(_STATUS[settlement.label], settlement.delay, settlement.error, exc)


def _call(
    func: Callable[..., Any], job: Job, context: JobContext
) -> tuple[outcomes.Settlement | None, BaseException | None, str | None]:
    """Run a handler the way a worker does and map what it did to the supervisor's write, with
    the workers' own mapping (outcomes.of_attempt), and the JSON of its return value when it
    completed and returned one."""
    raised: Exception | None = None
    value: Any = None
    mismatch = argument_mismatch(func, job.args, wants_context=wants_context(func))
    if mismatch is not None:
        discarded = outcomes.discard(job, f"the arguments do not match the handler: {mismatch}")
        return discarded, None, None
    try:
        args = opened(job).args  # encrypted arguments as the handler gave them (Secret)
        value = func(**args, job=context) if wants_context(func) else func(**args)
    except Exception as exc:
        raised = exc
    settlement = outcomes.of_attempt(
        job, raised, cancel_seen=context.cancel_seen, lease_lost_seen=context.lease_lost
    )
    if settlement is not None or value is None:
        return settlement, raised, None
    kept = outcomes.result_problem(value, outcomes.DEFAULT_RESULT_LIMIT)
    if isinstance(kept, str):
        problem = f"the handler of job {job.id} ({job.kind}) returned a result that cannot be kept"
        return outcomes.failure(job, f"{problem}: {kept}"), None, None
    return None, None, kept.text


def run_inline(
    func: Callable[..., Any],
    args: Mapping[str, Any] | None = None,
    *,
    kind: str = "inline",
    queue: str = "default",
    attempt: int = 1,
    max_attempts: int = 10,
    job_id: int = 1,
    lease_held: bool = True,
    cancelled: bool = False,
    parents: Sequence[Parent] | None = None,
    workflow: int = 1,
) -> Outcome:
    """Call ``func(**args)`` (with ``job=`` a real JobContext when it asks for one) and return
    what the supervisor would do. ``attempt`` and ``max_attempts`` decide, as in production,
    whether a failure is retried or discarded; ``lease_held`` and ``cancelled`` set what the
    context's ``lease_held()`` and ``cancelled()`` answer. ``parents`` makes it a step of
    ``workflow`` with those parents (``job.parents``). No database is needed."""
    now = datetime.now(timezone.utc)
    plain = unwrapped(dict(args or {}))  # Secrets as the handler would receive them
    group = None
    if parents is not None:
        group = {"workflow": workflow, "parents": [asdict(p) for p in parents]}
    job = Job(job_id, queue, kind, plain, 0, now, attempt, max_attempts, 0, now, now, group)
    context = _context(job, lambda: lease_held, lambda: cancelled)
    return _outcome(*_call(func, job, context))


def _context(job: Job, lease: Callable[[], bool], cancel: Callable[[], bool]) -> JobContext:
    return JobContext(
        id=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        lease_id=job.lease_id,
        worker=f"testing:{os.getpid()}",
        created_at=job.created_at,
        batch=job.batch,
        _check_lease=lease,
        _check_cancel=cancel,
    )


@dataclass
class DrainReport:
    """Every job a drain ran, in order, with its outcome."""

    runs: list[tuple[Job, Outcome]] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for _, outcome in self.runs if outcome.status == status)

    @property
    def completed(self) -> int:
        return self.count("completed")

    @property
    def by_status(self) -> dict[str, int]:
        return dict(Counter(outcome.status for _, outcome in self.runs))


def drain(
    conn: psycopg.Connection[Any],
    handlers: Mapping[str, Callable[..., Any]],
    *,
    queues: list[str] | None = None,
    max_jobs: int = 10_000,
    lease_seconds: float = 300.0,
) -> DrainReport:
    """Run the jobs that are due now on ``conn`` until none is left (or ``max_jobs`` ran).

    ``handlers`` maps job kinds to functions, like the YAML's ``handlers``. ``conn`` must not be
    inside a transaction (each claim and each outcome commits, as in a worker); an autocommit
    connection is simplest. Scheduled jobs whose time has come are staged first, as the
    supervisor's stager would. A retried or snoozed job is due later, so a drain ends; a job whose
    kind has no handler is retried with backoff, as a worker would. ``queues`` limits the drain
    to those queues; paused queues are skipped, as on a supervisor. Inside a queue the tenants
    take turns, as a child's claims rotate between them (each of weight 1 here).
    """
    report = DrainReport()
    worker = f"testing:{os.getpid()}:{time.monotonic_ns()}"
    tenants = TenantRotation()
    while len(report.runs) < max_jobs:
        # No supervisor's stager runs here: move scheduled jobs whose time has come ourselves.
        while scheduled.stage_due(conn):
            pass
        due = [row[0] for row in conn.execute(query("due_queues")).fetchall()]
        if not conn.autocommit:
            conn.commit()
        due = [q for q in due if queues is None or q in queues]
        if not due:
            return report
        for queue in due:
            start = tenants.resume(queue)
            claimed = jobs_api.claim(
                conn, queue, worker=worker, limit=1, lease_seconds=lease_seconds, resume=[start]
            )
            tenants.advance(queue, start, claimed)
            for job in claimed:
                report.runs.append((job, _run_claimed(conn, job, handlers)))
                if not conn.autocommit:
                    conn.commit()
    return report


def _run_claimed(
    conn: psycopg.Connection[Any], job: Job, handlers: Mapping[str, Callable[..., Any]]
) -> Outcome:
    func = handlers.get(job.kind)
    if func is None:
        known = ", ".join(sorted(handlers)) or "none"
        settlement: outcomes.Settlement | None = outcomes.failure(
            job, f"no handler for kind {job.kind!r} in this drain (handlers: {known})"
        )
        exc, kept = None, None
    else:
        context = _context(
            job,
            lambda: jobs_api.lease_held(conn, job),
            lambda: control.cancel_requested(conn, job.id, job.lease_id),
        )
        settlement, exc, kept = _call(func, job, context)
    if settlement is None:
        jobs_api.complete(conn, [job._replace(result=kept)]).raise_if_lost()
    else:
        jobs_api.settle(conn, [settlement]).raise_if_lost()
    return _outcome(settlement, exc, kept)
