"""The outcome writer: finished jobs' outcomes buffered, then written in batches.

Outcomes are written in batches (one DELETE for the completions, one UPDATE for everything
else), each fenced, so a batch of fast jobs costs one round trip, while a slow job's outcome is
written as soon as it finishes (see Completer.due). The completer is built once with what it
writes through (the child's session, its board, its pool) and then told of each outcome.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import psycopg

from supervisor.child.executor import job_fields
from supervisor.child.session import ChildSession
from supervisor.queue import costs, outcomes
from supervisor.queue import jobs as jobs_api
from supervisor.queue.dsn import RECONNECT_ERRORS, STATEMENT_CUT
from supervisor.queue.jobs import Job
from supervisor.shared.board import Board, Counter
from supervisor.shared.words import plural

log = logging.getLogger("pgq.worker")

# An outcome waits at most about this long (or until its batch ends) for others to share its
# round trip. Longer means fewer round trips per job; a crash in the window re-runs at most this
# much finished work, which at-least-once delivery allows.
FLUSH_AFTER = 0.25

# Sends a claim statement that also completes the finished jobs it is given, and records what
# the attempts written with it cost (costs.columns; None: none), read with jobs_api.read_claim.
ClaimSender = Callable[
    [psycopg.Connection[Any], Sequence[Job], Mapping[str, str] | None], psycopg.Cursor[Any]
]


class Completer:
    """Outcomes waiting to be written, and their writing."""

    def __init__(
        self,
        session: ChildSession,
        board: Board,
        pool: str,
        *,
        history: bool,
        on_scheduled: Callable[[], None] | None = None,
        on_unrecorded: Callable[[list[int]], None] | None = None,
        on_ran: Callable[[int], None] | None = None,
    ) -> None:
        self.session = session
        self.board = board
        self.pool = pool
        self.history = history
        # Called after retries or snoozes for later were written, so the master's stager wakes
        # for them at their run_at (the child reports it through its pipe; no NOTIFY on updates).
        self.on_scheduled = on_scheduled
        # Told the ids of the jobs that ran here and wait to be written, whenever they change
        # (the board shows them to the master: a child killed now held them run, not unstarted).
        self.on_unrecorded = on_unrecorded
        # Told one more such id as each outcome is added (on_unrecorded's list grown by one),
        # when given: telling the whole list at every add made a batch's bookkeeping quadratic.
        self.on_ran = on_ran
        # Told which outcomes the database recorded and which the fence refused (the tracing
        # ends each attempt's span there, with a fence-rejected event for the refused).
        self.on_written: Callable[[list[Job], list[Job]], None] | None = None
        self.done: list[Job] = []
        self.settled: list[outcomes.Settlement] = []
        # What completed handlers returned, as JSON text, by job id (the Executor's, shared).
        self.returned: dict[int, str] = {}
        # What each attempt cost, by job id (the Executor's, shared): written with the outcomes
        # when history is kept (pgq.attempt_costs).
        self.costs: dict[int, costs.Cost] = {}
        self.oldest: float | None = None
        # After the database refused an outcome (a trigger, a constraint), when to try it again.
        self.retry_at = 0.0
        self.retry_delay = 0.0
        # The last claim's limit_wait (jobs_api.Claimed): how long the queue's limits hold it back.
        self.limit_wait: float | None = None
        # Whether the last claim, a variant without limits, found that a limit exists now.
        self.limits_found = False

    def add(self, job: Job, settlement: outcomes.Settlement | None) -> None:
        if settlement is None:
            result = self.returned.pop(job.id, None) if self.returned else None
            self.done.append(job if result is None else job._replace(result=result))
        else:
            self.settled.append(settlement)
        if self.oldest is None:
            self.oldest = time.monotonic()
        if self.on_ran is None:
            self._changed()
        elif settlement is None or settlement.label != "released":
            self.on_ran(job.id)

    def held(self) -> list[int]:
        """The ids of the jobs whose outcome waits here."""
        return [job.id for job in self.held_jobs()]

    def held_jobs(self) -> list[Job]:
        """The jobs whose outcome waits here."""
        return self.done + [s.job for s in self.settled]

    def _changed(self) -> None:
        if self.on_unrecorded is not None:
            ran = [job.id for job in self.done]
            ran += [s.job.id for s in self.settled if s.label != "released"]
            self.on_unrecorded(ran)

    def __bool__(self) -> bool:
        return bool(self.done or self.settled)

    def __len__(self) -> int:
        return len(self.done) + len(self.settled)

    def due(self) -> bool:
        return self.oldest is not None and time.monotonic() - self.oldest >= FLUSH_AFTER

    def ready(self) -> bool:
        """False while an outcome the database refused waits out its delay."""
        return time.monotonic() >= self.retry_at

    def flush(self) -> None:
        """Write outcomes, retrying through database outages: a finished job must not be
        recorded as lost just because the database blinked."""
        session = self.session
        while self and self.ready():
            if session.conn is None and not session.reconnect(through_drain=True):
                return  # the master died: nobody is left to wait for
            try:
                self.write()
                return
            except RECONNECT_ERRORS as exc:
                session.warn(
                    f"cannot record the outcome of {plural(len(self), 'job')}: {exc}; retrying"
                )
                if session.process.orphaned:
                    return
                session.reconnect(through_drain=True)
            except psycopg.Error as exc:
                # Not an outage: something refused a write (write kept what it could not
                # record, and logged it). Carry on with other work; retried later.
                session.error(f"recording job outcomes failed: {exc}")
                return

    def write(self, claim: ClaimSender | None = None) -> list[Job]:
        """Write every outcome, fenced, in one round trip and one transaction, and claim the
        next batch with ``claim`` (given the finished jobs to complete in its statement): a
        batch whose jobs all succeeded costs one statement, any batch a single commit. Raises on
        connection errors with nothing cleared, so the caller can reconnect and write again.
        An outcome the database refuses (a trigger, a constraint) holds up neither the others
        nor the claim: it stays here, tried again after a growing delay. Returns the jobs
        claimed."""
        conn = self.session.conn
        assert conn is not None
        if not self.ready():
            return self._claim_only(conn, claim)
        try:
            self._write_heavy_results(conn)
        except RECONNECT_ERRORS:
            raise
        except psycopg.Error:
            self._write_one_by_one(conn)
            return self._claim_only(conn, claim)
        done, history = self.done, self.history
        # Without a claim to carry them, finished jobs go in the claim statement claiming
        # nothing; with neither a claim nor finished jobs, only the settle is sent.
        send: ClaimSender | None = claim
        if send is None and done:

            def send(
                conn: psycopg.Connection[Any],
                done: Sequence[Job],
                spent: Mapping[str, str] | None,
            ) -> psycopg.Cursor[Any]:
                return jobs_api.send_complete(conn, done, history=history, spent=spent)

        spent = self._attempts(done, self.settled)
        # The costs ride in the claim statement; without one (only settlements to write), in a
        # statement of their own beside the settle.
        carried = costs.columns(spent) if spent and send is not None else None
        try:
            settled = claimed = None
            if self.settled:
                # One round trip still: the settle travels with the claim.
                with conn.pipeline():
                    if spent and send is None:
                        costs.record(conn, spent)
                    settled = jobs_api.send_settle(conn, self.settled, history=history)
                    claimed = send(conn, done, carried) if send is not None else None
            elif send is not None:
                claimed = send(conn, done, carried)
            result = jobs_api.read_claim(claimed, done) if claimed is not None else None
        except STATEMENT_CUT:
            # A row lock (or the statement timeout) cut the round trip short: each outcome is
            # tried on its own, the one that waits stays here, and the claim goes without it.
            self._keep(spent)
            self._write_one_by_one(conn)
            return self._claim_only(conn, claim)
        except RECONNECT_ERRORS:
            self._keep(spent)
            raise
        except psycopg.Error:
            self._keep(spent)
            self._write_one_by_one(conn)
            return self._claim_only(conn, claim)
        self._written(
            _tally(
                self.board,
                self.pool,
                result.completed if result is not None and done else None,
                self.settled,
                jobs_api.fenced(settled, [s.job for s in self.settled])
                if settled is not None
                else None,
            )
        )
        self._announce(self.settled)
        self.limit_wait = result.limit_wait if result is not None else None
        self.limits_found = result.limits_found if result is not None else False
        self.done, self.settled, self.oldest = [], [], None
        self.retry_delay = 0.0
        self._changed()
        return result.jobs if result is not None else []

    def _attempts(
        self, done: Sequence[Job], settled: Sequence[outcomes.Settlement]
    ) -> list[costs.Attempt]:
        """The costs of the attempts being written (those that ran: not a job released or
        refused unstarted), taken out of the shared map; none without history."""
        return self._spend(
            itertools.chain(
                ((job, "completed") for job in done), ((s.job, s.label) for s in settled)
            )
        )

    def _spend(self, found: Iterable[tuple[Job, str]]) -> list[costs.Attempt]:
        """The costs of these (job, outcome) attempts, taken out of the shared map (``found``
        is not read when the map is empty)."""
        if not self.costs:
            return []
        if not self.history:
            self.costs.clear()
            return []
        spent = []
        for job, outcome in found:
            cost = self.costs.pop(job.id, None)
            if cost is not None:
                spent.append(
                    costs.Attempt(
                        job.id, job.attempts, job.queue, job.kind, job.tenant, outcome, cost
                    )
                )
        return spent

    def _record_alone(
        self, conn: psycopg.Connection[Any], job: Job, settlement: outcomes.Settlement | None
    ) -> None:
        """The cost of an attempt whose outcome was just written on its own: in a statement of
        its own beside it (kept in the map, it would stay there for the child's life, since
        its job is no longer among the outcomes waiting). Its outcome is written whatever
        happens to it: a failure here loses the cost row, never the outcome."""
        spent = self._spend([(job, "completed" if settlement is None else settlement.label)])
        if spent:
            with contextlib.suppress(psycopg.Error):
                costs.record(conn, spent)

    def _keep(self, spent: list[costs.Attempt]) -> None:
        """Costs not written go back, to travel with the next write of their outcomes."""
        for attempt in spent:
            self.costs.setdefault(attempt.job_id, attempt.cost)

    def _write_heavy_results(self, conn: psycopg.Connection[Any]) -> None:
        """Completions whose results would pass RESULTS_PER_STATEMENT in the claim are written
        first, a statement per run of them, so the claim carries one run at most."""
        runs = jobs_api.results_chunks(self.done)
        if len(runs) == 1:
            return
        for run in runs[:-1]:
            written = jobs_api.complete(conn, run, history=self.history)
            self._written(_tally(self.board, self.pool, written))
            gone = {job.id for job in run}
            self.done = [job for job in self.done if job.id not in gone]
            self._changed()

    def _written(self, written: tuple[list[Job], list[Job]]) -> None:
        if self.on_written is not None:
            self.on_written(*written)

    def _claim_only(self, conn: psycopg.Connection[Any], claim: ClaimSender | None) -> list[Job]:
        if claim is None:
            return []
        claimed = jobs_api.read_claim(claim(conn, (), None))
        self.limit_wait = claimed.limit_wait
        self.limits_found = claimed.limits_found
        return claimed.jobs

    def _announce(self, settled: list[outcomes.Settlement]) -> None:
        if self.on_scheduled is not None and any(s.scheduled for s in settled):
            self.on_scheduled()

    def _write_one_by_one(self, conn: psycopg.Connection[Any]) -> None:
        board, pool, history = self.board, self.pool, self.history
        refused: list[tuple[Job, outcomes.Settlement | None, psycopg.Error]] = []
        pending = [(j, None) for j in self.done] + [(s.job, s) for s in self.settled]
        try:
            while pending:
                job, settlement = pending[0]
                try:
                    if settlement is None:
                        written = _tally(
                            board, pool, jobs_api.complete(conn, [job], history=history)
                        )
                    else:
                        result = jobs_api.settle(conn, [settlement], history=history)
                        written = _tally(board, pool, None, [settlement], result)
                        self._announce([settlement])
                    self._written(written)
                    self._record_alone(conn, job, settlement)
                except STATEMENT_CUT as exc:
                    refused.append((job, settlement, exc))  # its row is held: tried again
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
) -> tuple[list[Job], list[Job]]:
    """Count what fenced writes kept, and say which results were dropped; returns the jobs
    whose outcome was recorded and the ones whose outcome the fence refused."""
    lost: list[Job] = []
    recorded: list[Job] = []
    if finished is not None:
        board.count(Counter.COMPLETED, len(finished.kept))
        lost.extend(finished.lost)
        recorded.extend(finished.kept)
    if result is not None:
        recorded.extend(result.kept)
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
    return recorded, lost


def _count_settlement(board: Board, s: outcomes.Settlement) -> None:
    counter = {
        "discarded": Counter.DISCARDED,
        "retried": Counter.RETRIED,
        "snoozed": Counter.SNOOZED,
        "released": Counter.RELEASED,
        "cancelled": Counter.CANCELLED,
        "lost": Counter.LOST,
    }.get(s.label)
    if counter is not None:  # 'unknown' is counted from the database (the metrics' gauge)
        board.count(counter)


# What each kept settlement says in the log, after "job ID (KIND) on queue QUEUE"; released
# and snoozed jobs say nothing (they were not the job's failure).
_SAID = {
    "lost": (
        logging.WARNING,
        ": its handler went on after lease_held() said the lease was lost; the result of "
        "attempt {attempt} is dropped and the job given back",
    ),
    "cancelled": (logging.INFO, " cancelled during attempt {attempt}"),
    "unknown": (
        logging.ERROR,
        ": {error}; it waits for its reconcile hook or an operator (jobs resolve)",
    ),
    "discarded": (logging.ERROR, " discarded after attempt {attempt}: {error}"),
    "retried": (logging.WARNING, " failed attempt {attempt}, retrying in {delay:.1f}s: {error}"),
}


def _log_settlement(s: outcomes.Settlement, pool: str) -> None:
    said = _SAID.get(s.label)
    if said is None:
        return
    level, text = said
    job = s.job
    error = ((s.error or "").strip().splitlines()[-1:] or [""])[0]
    what = text.format(attempt=job.attempts, error=error, delay=s.delay or 0.0)
    log.log(
        level,
        "job %s (%s) on queue %s%s",
        job.id,
        job.kind,
        job.queue,
        what,
        extra=job_fields(job, pool),
    )
