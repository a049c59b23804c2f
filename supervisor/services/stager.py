"""The stager: makes scheduled jobs available at their run_at, and wakes the master for it.

Jobs due later wait as 'scheduled', outside the claim index, so they cost a claim nothing. This
master service moves due ones to available in bounded batches (the stage_due query NOTIFYs
their queues, which wakes idle children on every host), then reads the earliest run_at still
waiting (one probe of the jobs_scheduled index) and makes the master wake exactly then. A job
scheduled meanwhile moves that moment earlier: an enqueue of a job due within 10 seconds
NOTIFYs pgq_scheduled (one due later waits for a look: the stager looks at least every
LOOK_EVERY, and a NOTIFY per transaction would serialize the producers' commits, migration
0036), and a child that wrote a retry or snooze tells the master through its report pipe;
either makes the stager look again at once. Any number of supervisors may stage at once (SKIP
LOCKED).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from supervisor.queue import scheduled
from supervisor.services.base import Host, Service

log = logging.getLogger("pgq.master")

# The longest the stager sleeps without looking: it catches jobs scheduled without a wake-up
# (notify=False, another host's retries, a lost LISTEN connection, a job due more than 10 s
# ahead: pgq.wakes_stagers) within this long. Keep it well under those 10 s.
LOOK_EVERY = 1.0
# Batches moved per run before the loop gets a turn (a backlog of due jobs is staged over
# several turns, a few milliseconds each, never in one long stop).
BATCHES_PER_RUN = 10
# How long to wait when a due job is locked by someone else.
LOCKED_WAIT = 0.05
# Added to the wait so the master wakes just after run_at, not a hair before it (the wait is
# measured from just before the query that read it; the selector rounds up to whole ms).
EPSILON = 0.0002


class Stager(Service):
    name = "stager"

    def __init__(self, host: Host, *, batch: int = scheduled.STAGE_BATCH) -> None:
        super().__init__(host, LOOK_EVERY)
        self.batch = batch
        self.wait = 0.0
        self.measured_at = time.monotonic()

    def soon(self) -> None:
        """Look again in this turn of the loop: a job was scheduled that may be due first."""
        self.next_due = min(self.next_due, time.monotonic())

    def next_run(self, now: float) -> float:
        # From the moment the database measured the wait, not from the start of the run.
        return self.measured_at + min(self.wait, self.interval)

    def run_once(self) -> int:
        self.wait = self.interval  # when the database is down: look again later
        self.measured_at = time.monotonic()
        result = self.host.db.run("stager", self._stage)
        if result is None:
            return 0
        staged, wait = result
        self.wait = wait
        self.host.counters.staged += staged
        return staged

    def _stage(self, conn: psycopg.Connection[Any]) -> tuple[int, float]:
        staged = 0
        for _ in range(BATCHES_PER_RUN):
            moved = scheduled.stage_due(conn, limit=self.batch)
            count = sum(m.jobs for m in moved)
            staged += count
            for m in moved:
                self.host.wake_queue(m.queue)
            if moved:
                log.debug(
                    "stager: %d jobs now available: %s",
                    count,
                    ", ".join(f"{m.queue} {m.jobs}" for m in moved),
                )
            if count < self.batch:
                break
        else:
            return staged, 0.0  # more are due: the next turn goes on
        self.measured_at = time.monotonic()
        seconds = scheduled.seconds_to_next(conn)
        if seconds is None:
            return staged, self.interval
        if seconds < -LOCKED_WAIT and not staged:
            # Due well before this run, yet not moved: another stager has it locked (and will
            # wake the workers), or a transaction holds the row. Look again shortly instead of
            # spinning. (A job falling due between the two statements is simply staged next.)
            return staged, LOCKED_WAIT
        return staged, max(0.0, seconds) + EPSILON
