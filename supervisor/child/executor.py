"""Running one claimed job: look up its handler, build its context, time it, map its outcome.

A handler that returns completed its job; whatever it raises is mapped to a settlement by
supervisor.queue.outcomes. The exceptions below are raised into a handler by the child's signal
handler (timeouts, cancels, the master's death); they are BaseExceptions, so a handler's
``except Exception`` cannot swallow them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from supervisor.crypto.opening import Opener, Refused
from supervisor.crypto.opening import scrub as scrub_opened
from supervisor.observability.tracing import Attempts, Telemetry
from supervisor.queue import costs, outcomes, progress
from supervisor.queue.context import JobContext
from supervisor.queue.jobs import Job
from supervisor.shared.board import Board, Counter
from supervisor.shared.redact import scrub

if TYPE_CHECKING:
    from supervisor.config import Config, JobPolicy
    from supervisor.config.handlers import Handler

log = logging.getLogger("pgq.worker")


class JobTimeout(BaseException):
    """Raised inside a handler that ran past its kind's timeout."""


class JobCancelled(BaseException):
    """Raised inside a handler whose job was cancelled while it ran (the master stopped it)."""


class Orphaned(BaseException):
    """Raised inside a handler when the master died: the child gives back its work and exits."""


def job_fields(job: Job, pool: str) -> dict[str, Any]:
    """The fields every log line about a job carries."""
    return {
        "job_id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempts,
        "pool": pool,
    }


class Executor:
    """Runs jobs for one child. One instance per child; ``run`` may be called from several
    handler threads."""

    def __init__(
        self,
        *,
        config: Config,
        pool: str,
        worker_id: str,
        handlers: Mapping[str, Handler],
        kinds: list[str],
        board: Board,
        lease_check: Callable[[Job], bool | None],
        cancel_check: Callable[[Job], bool | None],
        interruptible_thread: int | None,
        ask: progress.Writer | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.worker_id = worker_id
        self.handlers = handlers
        self.kind_index = {kind: i for i, kind in enumerate(kinds)}
        self.board = board
        self.lease_check = lease_check
        self.cancel_check = cancel_check
        self.ask = ask  # how a handler's progress reaches the database (the child's questions)
        # Handlers on this thread run on the process's main thread, where a signal handler can
        # raise into them (timeouts, orphaning); None when every handler runs on its own thread.
        self.interruptible_thread = interruptible_thread
        # True only while such a handler runs: a signal raises into the handler, never into our
        # own bookkeeping around it.
        self.interruptible = False
        self.deadline: float | None = None
        # Frames that are ours, not the handler's: a signal landing in one of them finds the
        # handler not yet called or already returned.
        self._own_code: set[Any] = {Executor.run.__code__}
        for h in handlers.values():
            call = getattr(type(h).__call__, "__code__", None)
            if call is not None:
                self._own_code.add(call)
        # Handler threads share the board's counters; `+=` on shared memory is not atomic.
        self.counter_lock = threading.Lock()
        # What completed handlers returned, as JSON text, until the Completer takes it (shared).
        self.returned: dict[int, str] = {}
        # What each attempt cost, by job id, until the Completer writes it with the outcome
        # (shared). Inline: the process's usage around the attempt; threaded: the thread's.
        self.costs: dict[int, costs.Cost] = {}
        self.shared_process = interruptible_thread is None
        # Told each attempt's cost (fair share by cost, supervisor.child.fair_cost); None: off.
        self.on_cost: Callable[[Job, costs.Cost], None] | None = None
        # Attempts' costs are kept with the history (pgq.attempt_costs): without it, and with
        # no fair share by cost, nothing reads them and no attempt is metered.
        self.keep_costs = config.history.enabled
        # OpenTelemetry, built here in the child after the fork (OTEL_* variables; None: off).
        telemetry = Telemetry.from_env()
        self.attempts = Attempts(telemetry) if telemetry is not None else None
        self.telemetry = telemetry
        self.opener = Opener.of(config)
        # Each kind's policy, looked up once: Config.policy builds a default JobPolicy for a
        # kind the YAML does not list at every call (three calls a job). A child's config does
        # not change while it lives (a reload replaces the children).
        self._policies: dict[str, JobPolicy] = {}

    def policy(self, kind: str) -> JobPolicy:
        found = self._policies.get(kind)
        if found is None:
            found = self._policies[kind] = self.config.policy(kind)
        return found

    def written(self, recorded: list[Job], lost: list[Job]) -> None:
        """Completer.on_written: the attempts' spans end once their outcome is written."""
        if self.attempts is not None:
            with self.counter_lock:
                self.attempts.written(recorded, lost)

    def close(self) -> None:
        """The child leaves: end the spans still open and flush the exporters."""
        if self.attempts is not None and self.telemetry is not None:
            self.attempts.end_all()
            self.telemetry.shutdown()

    def in_handler(self, frame: FrameType | None) -> bool:
        """Whether a signal that interrupted ``frame`` (the main thread's innermost frame)
        landed in the handler's own code. Checked by frame, not by a flag cleared after the
        handler returns: between the return and the clearing, a flag would still say
        "running" and a timeout raised there would turn a success into a failure."""
        return self.interruptible and frame is not None and frame.f_code not in self._own_code

    def timed_out(self, job: Job) -> outcomes.Settlement:
        """The failure of a job stopped for running past its kind's timeout; for a kind with
        effects outside the database, its outcome is unknown instead."""
        policy = self.policy(job.kind)
        reason = f"timed out after {policy.timeout:g}s (the kind's timeout); the worker was stopped"
        if policy.external:
            return outcomes.unknown(job, reason)
        return outcomes.failure(
            job,
            reason,
            max_attempts=policy.max_attempts,
            backoff_base=policy.backoff_base,
            backoff_cap=policy.backoff_cap,
        )

    def unstartable(self, job: Job) -> outcomes.Settlement | None:
        """The settlement of a job that must not start: cancelled after the claim, before its
        turn came (the master wrote it on the board), or of a kind with no handler here."""
        if self.board.is_cancelled(job.id):
            return outcomes.cancelled(job, "cancelled before it started", started=False)
        if job.kind in self.handlers:
            return None
        with self.counter_lock:
            self.board.count(Counter.UNKNOWN_KIND)
        policy = self.policy(job.kind)
        known = ", ".join(sorted(self.handlers)) or "none"
        return outcomes.failure(
            job,
            f"no handler for kind {job.kind!r} in pool {self.pool} (handlers here: {known}); "
            "retrying, since a worker from a newer deploy may know it",
            max_attempts=policy.max_attempts,
            backoff_base=policy.backoff_base,
            backoff_cap=policy.backoff_cap,
        )

    def mismatched(self, job: Job, target: str, mismatch: str) -> outcomes.Settlement:
        """Arguments that do not fit the handler's signature fail every attempt alike: the job
        is discarded at once, naming the parameter, instead of retried as if transient."""
        return outcomes.discard(
            job,
            f"the arguments of job {job.id} ({job.kind}, queue {job.queue}) do not match "
            f"{target}: {mismatch}; discarded without a retry (every attempt would fail alike)",
        )

    def context(
        self, job: Job, started: float, reporter: progress.Reporter | None = None
    ) -> JobContext:
        policy = self.policy(job.kind)
        return JobContext(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempts,
            max_attempts=policy.max_attempts or job.max_attempts,
            lease_id=job.lease_id,
            worker=self.worker_id,
            created_at=job.created_at,
            traceparent=job.traceparent,
            deadline=started + policy.timeout if policy.timeout else None,
            batch=job.batch,
            _check_lease=lambda: self.lease_check(job),
            _check_cancel=lambda: self.cancel_check(job),
            _report_progress=reporter.report if reporter is not None else None,
        )

    def run(self, job: Job, thread: int = 0) -> outcomes.Settlement | None:
        """Run one job; returns its settlement, or None when it completed."""
        refused = self.unstartable(job)
        if refused is not None:
            return refused
        policy = self.policy(job.kind)
        args: dict[str, Any] = job.args
        secrets: list[Any] = []
        if self.opener.wants(job.kind, args):
            try:
                args, secrets = self.opener.open(job.id, job.kind, args)
            except Refused as closed:
                return self._refused(job, closed)
        handler = self.handlers[job.kind]
        mismatch = handler.mismatch(job.args)
        if mismatch is not None:
            return self.mismatched(job, handler.target, mismatch)
        started = self.board.job_started(
            thread, job.id, job.lease_id, self.kind_index.get(job.kind, -1), policy.timeout
        )
        reporter = None
        if handler.wants_context and self.ask is not None:
            reporter = progress.Reporter(job.id, job.attempts, self.ask)
        context = self.context(job, started, reporter) if handler.wants_context else None
        settlement: outcomes.Settlement | None = None
        self.deadline = started + policy.timeout if policy.timeout else None
        # A value left by an earlier run of this id (a late outcome dropped) must not be kept.
        if self.returned:
            self.returned.pop(job.id, None)
        value: Any = None
        # Tracing off (the usual case): no context manager entered or closed around the job.
        traced: contextlib.AbstractContextManager[Any] | None = None
        span = None
        if self.attempts is not None:
            traced = self.attempts.attempt(job, self.pool, self.worker_id)
            span = traced.__enter__()
        meter = None
        if self.keep_costs or self.on_cost is not None:
            meter = costs.Meter(shared=self.shared_process)
            meter.start()
        try:
            self.interruptible = thread == self.interruptible_thread
            raised: BaseException | None = None
            try:
                value = handler(args, context)
            except (JobTimeout, JobCancelled, Orphaned):
                raise
            except BaseException as exc:  # a handler's SystemExit is its failure, not ours
                raised = exc
            self.interruptible = False
            if raised is not None or context is not None:
                settlement = outcomes.of_attempt(
                    job,
                    raised,
                    cancel_seen=context is not None and context.cancel_seen,
                    lease_lost_seen=context is not None and context.lease_lost,
                    max_attempts=policy.max_attempts,
                    backoff_base=policy.backoff_base,
                    backoff_cap=policy.backoff_cap,
                )
            # else it returned, and no context saw a cancel or a lost lease: it completed.
            if settlement is None and value is not None:
                settlement = self._keep_result(job, value)
            if secrets and settlement is not None and settlement.error:
                # A handler's message may quote what it was given: never an encrypted value.
                settlement = replace(settlement, error=scrub_opened(settlement.error, secrets))
        except JobTimeout:
            self.interruptible = False
            settlement = self.timed_out(job)
        except JobCancelled:
            self.interruptible = False
            settlement = outcomes.cancelled(job, "cancelled while running; the worker stopped it")
        finally:
            self.interruptible = False
            self.deadline = None
            if meter is not None:
                cost = self.costs[job.id] = meter.stop()
                if self.on_cost is not None:
                    self.on_cost(job, cost)
            if reporter is not None:
                with contextlib.suppress(Exception):  # progress never fails the attempt
                    reporter.finish()
            if traced is not None:
                traced.__exit__(None, None, None)
            if settlement is not None and settlement.error and self.config.web.redact:
                # A handler's exception may quote its arguments (`card 4111... declined`): the
                # text is kept, logged and put on the span, so the redacted values leave here.
                error = scrub(settlement.error, job.args, self.config.web.redact)
                settlement = dataclasses.replace(settlement, error=error)
            self.board.job_finished(thread)
            with self.counter_lock:
                self.board.observe_job(time.monotonic() - started)
                self.board.count(Counter.JOBS_RUN)
                if span is not None and self.attempts is not None:
                    label = "completed" if settlement is None else settlement.label
                    error = settlement.error if settlement is not None else None
                    self.attempts.outcome(job, span, label, error)
        return settlement

    def _refused(self, job: Job, refused: Refused) -> outcomes.Settlement:
        """A job whose encrypted arguments cannot be opened, or whose ``encrypt:`` field came in
        clear (supervisor/crypto/opening.py says which are retried)."""
        log.error("%s", refused.message, extra=job_fields(job, self.pool))
        if not refused.retry:
            return outcomes.discard(job, refused.message)
        policy = self.config.policy(job.kind)
        return outcomes.failure(
            job,
            refused.message,
            max_attempts=policy.max_attempts,
            backoff_base=policy.backoff_base,
            backoff_cap=policy.backoff_cap,
        )

    def _keep_result(self, job: Job, value: Any) -> outcomes.Settlement | None:
        """Encode what the handler returned, to be kept with its completion; a value that is
        not JSON, or too large, fails the attempt instead of being dropped."""
        problem = outcomes.result_problem(value, self.config.results.max_size)
        if isinstance(problem, str):
            policy = self.policy(job.kind)
            return outcomes.failure(
                job,
                f"the handler of job {job.id} ({job.kind}) returned a result that cannot be "
                f"kept: {problem}",
                max_attempts=policy.max_attempts,
                backoff_base=policy.backoff_base,
                backoff_cap=policy.backoff_cap,
            )
        self.returned[job.id] = problem.text
        return None
