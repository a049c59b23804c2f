"""The loop of a single-threaded child: handlers run on the main thread, one job at a time,
between claims. A batch's jobs run in order; told to stop (or to recycle) mid-batch, the child
gives back the ones it has not started."""

from __future__ import annotations

from supervisor.child.parts import Parts
from supervisor.queue.jobs import Job
from supervisor.shared.board import State
from supervisor.shared.exits import ChildExit


class InlineLoop:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def run(self) -> int:
        parts, pool = self.parts, self.parts.pool
        while not parts.process.draining:
            reason = parts.limits.recycle_reason()
            if reason is not None:
                parts.completer.flush()
                return reason
            claimed = parts.claimer.claim(pool.batch)
            if claimed:
                self.run_batch(claimed)
            else:
                parts.idle(pool.poll_interval)
        parts.board.set_state(State.DRAINING)
        parts.completer.flush()
        return ChildExit.DRAINED

    def run_batch(self, claimed: list[Job]) -> None:
        parts = self.parts
        parts.board.set_state(State.RUNNING)
        parts.unstarted = list(claimed)
        while parts.unstarted:
            if parts.process.draining or parts.limits.recycle_reason() is not None:
                parts.release_unstarted()
                break
            job = parts.in_hand = parts.unstarted.pop(0)
            settlement = parts.executor.run(job)
            parts.in_hand = None
            parts.completer.add(job, settlement)
            parts.limits.jobs_run += 1
            # Outcomes that have waited long enough are written before the next job; after the
            # batch's last job they travel with the next claim, which follows at once.
            if parts.unstarted and parts.completer.due():
                parts.completer.flush()
