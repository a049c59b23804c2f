"""The loop of a single-threaded child: handlers run on the main thread, one job at a time,
between claims. A batch's jobs run in order. Told to stop (or to recycle) mid-batch, the child
gives back the ones it has not started; before starting the next job of a batch that has waited
(STOPS_LOOK_AFTER), it asks which of the rest were cancelled (they end cancelled, never started)
or belong to a queue paused since the claim (given back, as a drain does: no attempt spent)."""

from __future__ import annotations

import logging
import time

from supervisor.child.executor import job_fields
from supervisor.child.parts import Parts
from supervisor.queue import control, outcomes
from supervisor.queue.jobs import Job
from supervisor.shared.board import State
from supervisor.shared.exits import ChildExit

log = logging.getLogger("pgq.worker")

# A batch held this long is asked about again before its next job starts: one short query
# then, none for a batch of fast jobs.
STOPS_LOOK_AFTER = 0.25


class InlineLoop:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.looked_at = 0.0

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
        parts.publish_held()
        self.looked_at = time.monotonic()
        while parts.unstarted:
            if parts.process.draining or parts.limits.recycle_reason() is not None:
                parts.release_unstarted()
                break
            self.heed_stops()
            if not parts.unstarted:
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

    def heed_stops(self) -> None:
        """Take the cancelled and the paused out of the rest of the batch."""
        parts, now = self.parts, time.monotonic()
        if now - self.looked_at < STOPS_LOOK_AFTER:
            return
        self.looked_at = now
        claims = [(job.id, job.lease_id) for job in parts.unstarted]
        stops = parts.session.ask(lambda conn: control.unstarted_stops(conn, claims))
        if stops is None or not (stops.cancelled or stops.paused):
            return  # could not ask: the master's cancel watch and the next claim still look
        keep = []
        for job in parts.unstarted:
            if job.id in stops.cancelled:
                parts.completer.add(
                    job, outcomes.cancelled(job, "cancelled before it started", started=False)
                )
            elif job.id in stops.paused:
                log.info(
                    "job %s (%s) given back unstarted: queue %s was paused",
                    job.id,
                    job.kind,
                    job.queue,
                    extra=job_fields(job, parts.pool.name),
                )
                parts.completer.add(job, outcomes.release(job))
            else:
                keep.append(job)
        parts.unstarted = keep
