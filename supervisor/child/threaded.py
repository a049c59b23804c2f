"""The loop of a threaded child: the main thread claims and writes, handler threads run.

Told to stop, it gives back what no thread has started and keeps writing outcomes until the
last thread still working returns: one hung handler must not hold its siblings' finished work
back, nor make it look unstarted. A handler thread cannot be interrupted, so a job past its
kind's timeout is recorded as timed out and its thread left behind.
"""

from __future__ import annotations

import logging
import time

from supervisor.child.executor import job_fields
from supervisor.child.parts import Parts
from supervisor.child.pool import ThreadPool
from supervisor.child.process import drain
from supervisor.shared.board import State
from supervisor.shared.exits import ChildExit

log = logging.getLogger("pgq.worker")


class ThreadedLoop:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.threads = ThreadPool(
            parts.pool.threads, lambda job, i: parts.executor.run(job, thread=i), parts.handed_out
        )
        # Jobs recorded as timed out whose threads have not returned (a handler stuck in
        # native code cannot be interrupted); the process leaves without them.
        self.abandoned: set[int] = set()

    def run(self) -> int:
        parts, pool, threads = self.parts, self.parts.pool, self.threads
        completer = parts.completer
        threads.start()
        exit_code: int = ChildExit.DRAINED
        stopping = False
        questions = parts.questions
        while True:
            questions.answer()
            self.collect_finished()
            if parts.process.draining:
                stopping = True
                self.record_timeouts()
            if stopping:
                parts.unstarted.extend(threads.take_back())
                parts.release_unstarted()
            if completer and (completer.due() or not threads.handed_out or stopping):
                completer.flush()
            if stopping and not threads.handed_out.keys() - self.abandoned:
                break
            if not stopping:
                reason = parts.limits.recycle_reason()
                if reason is not None:
                    exit_code, stopping = reason, True
                    continue
            free = threads.free
            claiming = free > 0 and not stopping
            if claiming:
                claimed = parts.claimer.claim(min(pool.batch, free))
                if claimed:
                    for job in claimed:
                        threads.post(job)
                    parts.publish_held()
                    parts.board.set_state(State.RUNNING)
                    continue
            wait = pool.poll_interval if free > 0 else 1.0
            # What the next claim waits for, only while there will be one: a draining child
            # claims nothing, and a head claim due now would make this wait 0 at every turn.
            owed = parts.claimer.next_claim_in(time.monotonic()) if claiming else None
            if owed is not None:
                wait = min(wait, owed)
            if completer and completer.ready():
                wait = min(wait, 0.02)
            questions.answer()  # asked while this turn claimed or wrote
            if threads.handed_out:
                parts.board.set_state(State.DRAINING if stopping else State.RUNNING)
                # A wake-up while busy needs no hint: the next claim looks anyway.
                woken = parts.process.wait([threads.done_r, parts.spec.wake_fd, questions.fd], wait)
                for fd in woken:
                    drain(fd)
            else:
                parts.idle(wait, (threads.done_r, questions.fd))
        parts.board.set_state(State.DRAINING)
        threads.stop()
        return exit_code

    def collect_finished(self) -> None:
        parts = self.parts
        for job, settlement in self.threads.finished():
            parts.limits.jobs_run += 1
            if job.id in self.abandoned:
                self.abandoned.discard(job.id)
                log.warning(
                    "job %s (%s) on queue %s returned after its timeout was recorded; "
                    "this late outcome is dropped",
                    job.id,
                    job.kind,
                    job.queue,
                    extra=job_fields(job, parts.pool.name),
                )
                continue
            parts.completer.add(job, settlement)

    def record_timeouts(self) -> None:
        """A job past its kind's timeout is recorded as timed out (spending its attempt) and
        its thread left behind, so its siblings can finish and be recorded before this child
        leaves."""
        parts, now = self.parts, time.monotonic()
        for running in parts.board.running_jobs():
            job = self.threads.handed_out.get(running.job_id)
            if (
                job is None
                or job.id in self.abandoned
                or job.lease_id != running.lease_id
                or running.deadline is None
                or now < running.deadline
            ):
                continue
            self.abandoned.add(job.id)
            parts.completer.add(job, parts.executor.timed_out(job))
            log.warning(
                "job %s (%s) on queue %s is past its timeout after attempt %s; recorded as "
                "timed out, its thread abandoned",
                job.id,
                job.kind,
                job.queue,
                job.attempts,
                extra=job_fields(job, parts.pool.name),
            )
