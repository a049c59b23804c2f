"""A child's parts, built once after the fork, and the jobs it holds in hand.

The process (signals, pipes), the session (the connection), the completer (outcomes waiting to
be written), the claimer, the executor and the limits; the loops (inline, threaded) drive them.
"""

from __future__ import annotations

import logging
import random
import time

from supervisor.child.claimer import Claimer
from supervisor.child.completer import Completer
from supervisor.child.executor import Executor
from supervisor.child.fair_cost import CostFairness
from supervisor.child.limits import Limits
from supervisor.child.process import ChildProcess, drain
from supervisor.child.questions import Questions
from supervisor.child.session import ChildSession
from supervisor.child.spec import ChildSpec
from supervisor.queue import control, outcomes
from supervisor.queue import jobs as jobs_api
from supervisor.queue.jobs import Job
from supervisor.shared.board import State

log = logging.getLogger("pgq.worker")


class Parts:
    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.pool = spec.pool
        self.board = spec.board
        self.process = ChildProcess(spec)
        # The jobs in hand: claimed and not started, running on the main thread, or handed to
        # handler threads and not yet back.
        self.unstarted: list[Job] = []
        self.in_hand: Job | None = None
        self.handed_out: dict[int, Job] = {}
        self.session = ChildSession(self.process, self.held)
        self.completer = Completer(
            self.session,
            spec.board,
            spec.pool.name,
            history=spec.config.history.enabled,
            on_scheduled=lambda: self.process.report(b"S"),
            on_unrecorded=self.unrecorded_changed,
        )
        self.claimer = Claimer(self.session, self.completer)
        self.questions = Questions(self.session)
        self.limits = Limits(spec)
        self.executor = Executor(
            config=spec.config,
            pool=spec.pool.name,
            worker_id=spec.worker_id,
            handlers=spec.handlers,
            kinds=spec.kinds,
            board=spec.board,
            lease_check=self.lease_held,
            cancel_check=self.cancel_requested,
            interruptible_thread=0 if spec.pool.threads == 1 else None,
            ask=self.questions.ask,
        )
        self.process.executor = self.executor
        self.completer.returned = self.executor.returned
        self.completer.costs = self.executor.costs
        fair = spec.config.fair_by_cost & set(spec.pool.queues)
        if fair:
            fairness = CostFairness(self.claimer.tenants, spec.config.tenants, frozenset(fair))
            self.executor.on_cost = fairness.observe
        self.completer.on_written = self.executor.written

    def held(self) -> list[int]:
        """The ids of every job this child holds in hand: running, waiting to start, or
        finished with its outcome not yet written."""
        held = [job.id for job in self.unstarted]
        held += list(self.handed_out)
        if self.in_hand is not None:
            held.append(self.in_hand.id)
        return held + self.completer.held()

    def publish_held(self) -> None:
        """Show the master every claim this child holds (the board): it renews their leases and
        watches them for cancels by primary key. Called after a claim and whenever outcomes
        wait or were written; a claim shown a moment after it ended costs one fenced no-op."""
        claims = [(job.id, job.lease_id) for job in self.unstarted]
        claims += [(job.id, job.lease_id) for job in self.handed_out.values()]
        if self.in_hand is not None:
            claims.append((self.in_hand.id, self.in_hand.lease_id))
        claims += [(job.id, job.lease_id) for job in self.completer.held_jobs()]
        self.board.set_held(claims)

    def unrecorded_changed(self, ran: list[int]) -> None:
        self.board.set_unrecorded(ran)
        self.publish_held()

    def lease_held(self, job: Job) -> bool | None:
        return self.questions.ask(lambda conn: jobs_api.lease_held(conn, job))

    def cancel_requested(self, job: Job) -> bool | None:
        return self.questions.ask(lambda conn: control.cancel_requested(conn, job.id, job.lease_id))

    def release_unstarted(self) -> None:
        for job in self.unstarted:
            self.completer.add(job, outcomes.release(job))
        if self.unstarted:
            log.info(
                "%s gave back %d claimed jobs it had not started",
                self.process.label,
                len(self.unstarted),
                extra={"pool": self.pool.name},
            )
        self.unstarted = []

    def idle(self, poll_interval: float, extra_fds: tuple[int, ...] = ()) -> None:
        """Wait for a wake-up from the master, a signal, or the poll interval (jittered so
        idle children do not poll in step), or until the token a rate promised is due (the
        database already spread those promises over the waiting children)."""
        self.board.set_state(State.IDLE)
        wake_fd = self.spec.wake_fd
        timeout = poll_interval * random.uniform(0.5, 1.0)
        owed = self.claimer.next_claim_in(time.monotonic())
        if owed is not None:
            timeout = min(timeout, owed)
        ready = self.process.wait([wake_fd, *extra_fds], timeout)
        for fd in ready:
            if fd != wake_fd:
                drain(fd)
        if wake_fd in ready:
            self.claimer.woken(wake_fd)
