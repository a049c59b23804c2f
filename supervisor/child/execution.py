"""Running one claimed job, and buffering its outcome until it is written.

A handler that returns completed its job; whatever it raises is mapped to a settlement by
supervisor.queue.outcomes. Outcomes are written in batches (one DELETE for the completions, one
UPDATE for everything else), each fenced, so a batch of fast jobs costs one round trip, while a
slow job's outcome is written as soon as it finishes (see Results.due).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import psycopg

from supervisor.queue import jobs as jobs_api
from supervisor.queue import outcomes
from supervisor.queue.context import JobContext
from supervisor.queue.dsn import RECONNECT_ERRORS
from supervisor.queue.jobs import Job
from supervisor.shared.board import Board, Counter

if TYPE_CHECKING:
    from supervisor.config import Config
    from supervisor.config.handlers import Handler

log = logging.getLogger("pgq.worker")

# An outcome waits at most about this long (or until its batch ends) for others to share its
# round trip. Longer means fewer round trips per job; a crash in the window re-runs at most this
# much finished work, which at-least-once delivery allows.
FLUSH_AFTER = 0.25


class JobTimeout(BaseException):
    """Raised inside a handler that ran past its kind's timeout. A BaseException, so a
    handler's `except Exception` cannot swallow it."""


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


# Sends a claim statement that also completes the finished jobs it is given (read with
# jobs_api.read_claim).
ClaimSender = Callable[[psycopg.Connection[Any], Sequence[Job]], psycopg.Cursor[Any]]


def _claim_only(conn: psycopg.Connection[Any], claim: ClaimSender | None) -> list[Job]:
    return jobs_api.read_claim(claim(conn, ())).jobs if claim is not None else []


@dataclass
class Results:
    """Outcomes waiting to be written."""

    done: list[Job] = field(default_factory=list)
    settled: list[outcomes.Settlement] = field(default_factory=list)
    oldest: float | None = None
    # After the database refused an outcome (a trigger, a constraint), when to try it again.
    retry_at: float = 0.0
    retry_delay: float = 0.0
    # Called after retries or snoozes for later were written, so the master's stager wakes
    # for them at their run_at (the child reports it through its pipe; no NOTIFY on updates).
    on_scheduled: Callable[[], None] | None = None
    # Told the ids of the jobs that ran here and wait to be written, whenever they change (the
    # board shows them to the master: a child killed now held them run, not unstarted).
    on_unrecorded: Callable[[list[int]], None] | None = None

    def add(self, job: Job, settlement: outcomes.Settlement | None) -> None:
        if settlement is None:
            self.done.append(job)
        else:
            self.settled.append(settlement)
        if self.oldest is None:
            self.oldest = time.monotonic()
        self._changed()

    def _changed(self) -> None:
        if self.on_unrecorded is not None:
            ran = [job.id for job in self.done]
            ran += [s.job.id for s in self.settled if s.label != "released"]
            self.on_unrecorded(ran)

    def __bool__(self) -> bool:
        return bool(self.done or self.settled)

    def due(self) -> bool:
        return self.oldest is not None and time.monotonic() - self.oldest >= FLUSH_AFTER

    def ready(self) -> bool:
        """False while an outcome the database refused waits out its delay."""
        return time.monotonic() >= self.retry_at

    def write(
        self,
        conn: psycopg.Connection[Any],
        board: Board,
        pool: str,
        history: bool,
        claim: ClaimSender | None = None,
    ) -> list[Job]:
        """Write every outcome, fenced, in one round trip and one transaction, and claim the
        next batch with ``claim`` (given the finished jobs to complete in its statement): a
        batch whose jobs all succeeded costs one statement, any batch a single commit. Raises on
        connection errors with nothing cleared, so the caller can reconnect and write again.
        An outcome the database refuses (a trigger, a constraint) holds up neither the others
        nor the claim: it stays here, tried again after a growing delay. Returns the jobs
        claimed."""
        if not self.ready():
            return _claim_only(conn, claim)
        done = self.done
        # Without a claim to carry them, finished jobs go in the claim statement claiming
        # nothing; with neither a claim nor finished jobs, only the settle is sent.
        send: ClaimSender | None = claim
        if send is None and done:

            def send(conn: psycopg.Connection[Any], done: Sequence[Job]) -> psycopg.Cursor[Any]:
                return jobs_api.send_complete(conn, done, history=history)

        try:
            settled = claimed = None
            if self.settled:
                with conn.pipeline():
                    settled = jobs_api.send_settle(conn, self.settled, history=history)
                    claimed = send(conn, done) if send is not None else None
            elif send is not None:
                claimed = send(conn, done)
            result = jobs_api.read_claim(claimed, done) if claimed is not None else None
        except RECONNECT_ERRORS:
            raise
        except psycopg.Error:
            self._write_one_by_one(conn, board, pool, history)
            return _claim_only(conn, claim)
        _tally(
            board,
            pool,
            result.completed if result is not None and done else None,
            self.settled,
            jobs_api.fenced(settled, [s.job for s in self.settled])
            if settled is not None
            else None,
        )
        self._announce(self.settled)
        self.done, self.settled, self.oldest = [], [], None
        self.retry_delay = 0.0
        self._changed()
        return result.jobs if result is not None else []

    def _announce(self, settled: list[outcomes.Settlement]) -> None:
        if self.on_scheduled is not None and any(s.scheduled for s in settled):
            self.on_scheduled()

    def _write_one_by_one(
        self, conn: psycopg.Connection[Any], board: Board, pool: str, history: bool
    ) -> None:
        refused: list[tuple[Job, outcomes.Settlement | None, psycopg.Error]] = []
        pending = [(j, None) for j in self.done] + [(s.job, s) for s in self.settled]
        try:
            while pending:
                job, settlement = pending[0]
                try:
                    if settlement is None:
                        _tally(board, pool, jobs_api.complete(conn, [job], history=history))
                    else:
                        result = jobs_api.settle(conn, [settlement], history=history)
                        _tally(board, pool, None, [settlement], result)
                        self._announce([settlement])
                except RECONNECT_ERRORS:
                    raise
                except psycopg.Error as exc:
                    refused.append((job, settlement, exc))
                pending.pop(0)
        finally:
            # Written ones are gone; an outage mid-way leaves the rest for after a reconnect.
            left = [(j, s) for j, s, _ in refused] + pending
            self.done = [job for job, s in left if s is None]
            self.settled = [s for _, s in left if s is not None]
            self._changed()
        if not refused:
            self.oldest, self.retry_delay = None, 0.0
            return
        self.retry_delay = min(max(1.0, self.retry_delay * 2), 30.0)
        self.retry_at = time.monotonic() + self.retry_delay
        for job, _, exc in refused:
            log.error(
                "the database refused the outcome of job %s (%s) on queue %s, attempt %s: %s; "
                "the job stays claimed, trying again in %.0fs",
                job.id,
                job.kind,
                job.queue,
                job.attempts,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                self.retry_delay,
                extra=job_fields(job, pool),
            )


def _tally(
    board: Board,
    pool: str,
    finished: jobs_api.Fenced | None,
    settled: list[outcomes.Settlement] | None = None,
    result: jobs_api.Fenced | None = None,
) -> None:
    """Count what fenced writes kept, and say which results were dropped."""
    lost: list[Job] = []
    if finished is not None:
        board.count(Counter.COMPLETED, len(finished.kept))
        lost.extend(finished.lost)
    if result is not None:
        kept = {j.id for j in result.kept}
        for s in settled or []:
            if s.job.id in kept:
                _count_settlement(board, s)
                _log_settlement(s, pool)
        lost.extend(result.lost)
    for job in lost:
        board.count(Counter.LOST)
        log.warning(
            "lease lost, result dropped: job %s (%s) on queue %s was given to another "
            "worker while attempt %s ran here",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            extra=job_fields(job, pool),
        )


def _count_settlement(board: Board, s: outcomes.Settlement) -> None:
    counter = {
        "discarded": Counter.DISCARDED,
        "retried": Counter.RETRIED,
        "snoozed": Counter.SNOOZED,
        "released": Counter.RELEASED,
        "cancelled": Counter.CANCELLED,
    }[s.label]
    board.count(counter)


def _log_settlement(s: outcomes.Settlement, pool: str) -> None:
    job = s.job
    first_line = (s.error or "").strip().splitlines()[-1:] or [""]
    if s.label == "cancelled":
        log.info(
            "job %s (%s) on queue %s cancelled during attempt %s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            extra=job_fields(job, pool),
        )
    elif s.label == "discarded":
        log.error(
            "job %s (%s) on queue %s discarded after attempt %s: %s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            first_line[0],
            extra=job_fields(job, pool),
        )
    elif s.label == "retried":
        log.warning(
            "job %s (%s) on queue %s failed attempt %s, retrying in %.1fs: %s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            s.delay or 0.0,
            first_line[0],
            extra=job_fields(job, pool),
        )


class Executor:
    """Runs jobs for one child: looks up the handler, builds its context, times it, maps the
    outcome. One instance per child; ``run`` may be called from several handler threads."""

    def __init__(
        self,
        *,
        config: Config,
        pool: str,
        worker_id: str,
        handlers: Mapping[str, Handler],
        kinds: list[str],
        board: Board,
        lease_check: Callable[[Job], bool],
        cancel_check: Callable[[Job], bool],
        interruptible_thread: int | None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.worker_id = worker_id
        self.handlers = handlers
        self.kind_index = {kind: i for i, kind in enumerate(kinds)}
        self.board = board
        self.lease_check = lease_check
        self.cancel_check = cancel_check
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

    def in_handler(self, frame: FrameType | None) -> bool:
        """Whether a signal that interrupted ``frame`` (the main thread's innermost frame)
        landed in the handler's own code. Checked by frame, not by a flag cleared after the
        handler returns: between the return and the clearing, a flag would still say
        "running" and a timeout raised there would turn a success into a failure."""
        return self.interruptible and frame is not None and frame.f_code not in self._own_code

    def timed_out(self, job: Job) -> outcomes.Settlement:
        """The failure of a job stopped for running past its kind's timeout."""
        policy = self.config.policy(job.kind)
        return outcomes.failure(
            job,
            f"timed out after {policy.timeout:g}s (the kind's timeout); the worker was stopped",
            max_attempts=policy.max_attempts,
            backoff_base=policy.backoff_base,
            backoff_cap=policy.backoff_cap,
        )

    def run(self, job: Job, thread: int = 0) -> outcomes.Settlement | None:
        """Run one job; returns its settlement, or None when it completed."""
        if self.board.cancelled_job() == job.id:
            # Cancelled after the claim, before its turn came (the master wrote it on the board).
            return outcomes.cancelled(job, "cancelled before it started", started=False)
        policy = self.config.policy(job.kind)
        handler = self.handlers.get(job.kind)
        if handler is None:
            with self.counter_lock:
                self.board.count(Counter.UNKNOWN_KIND)
            known = ", ".join(sorted(self.handlers)) or "none"
            return outcomes.failure(
                job,
                f"no handler for kind {job.kind!r} in pool {self.pool} (handlers here: {known}); "
                "retrying, since a worker from a newer deploy may know it",
                max_attempts=policy.max_attempts,
                backoff_base=policy.backoff_base,
                backoff_cap=policy.backoff_cap,
            )
        started = self.board.job_started(
            thread, job.id, job.lease_id, self.kind_index.get(job.kind, -1), policy.timeout
        )
        context = None
        if handler.wants_context:
            context = JobContext(
                id=job.id,
                kind=job.kind,
                queue=job.queue,
                attempt=job.attempts,
                max_attempts=policy.max_attempts or job.max_attempts,
                lease_id=job.lease_id,
                worker=self.worker_id,
                created_at=job.created_at,
                deadline=started + policy.timeout if policy.timeout else None,
                _check_lease=lambda: self.lease_check(job),
                _check_cancel=lambda: self.cancel_check(job),
            )
        settlement: outcomes.Settlement | None = None
        self.deadline = started + policy.timeout if policy.timeout else None
        try:
            self.interruptible = thread == self.interruptible_thread
            handler(job.args, context)
            self.interruptible = False
            if context is not None and context.cancel_seen:
                # It saw the cancel and stopped early: its return is not a success.
                settlement = outcomes.cancelled(job, "cancelled while running; the handler stopped")
        except JobTimeout:
            self.interruptible = False
            settlement = self.timed_out(job)
        except JobCancelled:
            self.interruptible = False
            settlement = outcomes.cancelled(job, "cancelled while running; the worker stopped it")
        except Orphaned:
            self.interruptible = False
            raise
        except BaseException as exc:  # a handler's SystemExit is its failure, not ours
            self.interruptible = False
            settlement = outcomes.settlement_for(
                job,
                exc,
                max_attempts=policy.max_attempts,
                backoff_base=policy.backoff_base,
                backoff_cap=policy.backoff_cap,
            )
        finally:
            self.interruptible = False
            self.deadline = None
            self.board.job_finished(thread)
            with self.counter_lock:
                self.board.observe_job(time.monotonic() - started)
                self.board.count(Counter.JOBS_RUN)
        return settlement
