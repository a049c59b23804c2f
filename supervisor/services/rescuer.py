"""The rescuer, in slices (``slices.py``): jobs whose lease expired go back to their queue.

A lease expires when its worker stopped renewing it: a host that died, a network partition.
Once per ``rescue.interval`` across every supervisor on the database, one of them claims the
run (the maintenance record, under the rescuer's advisory lock) and moves the expired jobs back
one slice per turn of its loop: after a host with big batches died there may be many, and the
loop that renews this host's own leases must not wait behind them. A slice goes ahead only
while the run is still the latest one, so a run that outlasts its interval stops when another
supervisor starts the next, instead of running beside it.

Each slice is a window of expiry times (sql/leases.sql, rescue_window), from where the last
run's windows stopped (less one interval, so a lease skipped while someone held its row is
looked at twice) to the run's start. While a snapshot holds the xmin horizon, jobs_lease keeps
the entry of every job that ran, and a rescue reading "every lease expired by now" walks all of
them (over a 600 s hold at 3,000 jobs/s it ran into the master's 1 s statement timeout every
minute, issue 30); a window holds the entries of the jobs claimed in one stretch of time only,
so its cost follows the rate, not the hold. The window's width follows what the last one cost.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg

from supervisor.queue import leases, locks, maintenance
from supervisor.services.base import Host
from supervisor.services.slices import STEP_RETRY_AFTER, SlicedService, SliceSize

log = logging.getLogger("pgq.master")

# Jobs named in the log line of a run; the count covers them all.
NAMED_IN_LOG = 10
# The width of expiry time a window covers follows what windows cost, kept from run to run. A
# window's time is a fixed part (its round trips: on a loaded machine 100 ms and more, measured
# at a load of 19 on two cores) and a part that grows with the entries it walks; the width is
# set so that the second stays about the size of the first (the fastest recent window's time,
# the floor): below twice the floor it doubles (an empty stretch after a quiet weekend is
# crossed in a few dozen windows), past four times it halves, past SLOW_WINDOW (a quarter of the
# master's statement timeout) it quarters. Aimed at a fixed time instead (10 ms), the windows of
# a loaded machine shrank to nothing but round trips, and a run took longer than its interval.
# The first run's first window covers the whole run: on a clean database that is one window.
WINDOW_SECONDS = 0.01  # a turn runs windows while it has spent less than this
SLOW_WINDOW = 0.25
MIN_WIDTH = timedelta(milliseconds=10)
MAX_WIDTH = timedelta(days=30)


class WindowWidth:
    """How much expiry time the next window covers."""

    def __init__(self) -> None:
        self.width = MAX_WIDTH
        self.floor: float | None = None  # the fastest recent window's time

    def learn(self, took: float) -> None:
        # The floor creeps up when no window is as fast any more (the machine got busier).
        self.floor = took if self.floor is None else min(took, self.floor * 1.05)
        if took > SLOW_WINDOW:
            factor = 0.25
        elif took > 4 * self.floor:
            factor = 0.5
        elif took < 2 * self.floor:
            factor = 2.0
        else:
            factor = 1.0
        self.width = min(MAX_WIDTH, max(MIN_WIDTH, self.width * factor))

    def failed(self) -> None:
        """A window that failed (most likely the statement timeout) is tried again narrower."""
        self.width = max(MIN_WIDTH, self.width / 4)


class RescueRun:
    """One interval's rescue, claimed at ``started_at``; ``step`` moves one slice."""

    def __init__(
        self, host: Host, started_at: datetime, since: datetime, width: WindowWidth
    ) -> None:
        self.host = host
        self.started_at = started_at
        # The windows run from ``since`` to the run's start (the database's clock).
        self.since = since
        self.width = width
        self.size = SliceSize(host.config.rescue.batch)
        self.requeued = 0
        self.discarded = 0
        self.named: list[maintenance.Moved] = []
        self.superseded = False
        self.last_rows = 0  # moved by the last window
        self.clock = time.monotonic()
        self.slices = 0

    def step(self) -> float | None:
        """Windows until one comes back full, this turn has spent WINDOW_SECONDS, or the run
        reaches its start (an empty stretch costs one turn, not one per window)."""
        began = time.monotonic()
        while True:
            pause = self._one_window()
            if pause != 0.0 or time.monotonic() - began >= WINDOW_SECONDS:
                return pause
            if self.size.full(self.last_rows):
                return pause

    def _one_window(self) -> float | None:
        if self.since >= self.started_at and self.slices:
            return None
        # (A run with nothing to cover still runs its one empty window: that writes the mark.)
        self.slices += 1
        until = min(self.since + self.width.width, self.started_at)
        began = time.monotonic()
        done = self.size.take(
            lambda limit: self.host.db.run(
                "rescuer", lambda conn: self._window(conn, until, limit)
            ),
            rows=lambda done: len(done.moved),
        )
        if done is None:
            self.width.failed()
            return STEP_RETRY_AFTER
        if done.next_since is None:
            self.superseded = True
            return None
        self.last_rows = len(done.moved)
        if not done.full:
            self.width.learn(time.monotonic() - began)
        self.since = done.next_since
        discarded = sum(1 for m in done.moved if m.state == "discarded")
        self.requeued += len(done.moved) - discarded
        self.discarded += discarded
        self.host.counters.rescued += len(done.moved) - discarded
        self.host.counters.rescued_discarded += discarded
        self.named.extend(done.moved[: NAMED_IN_LOG - len(self.named)])
        return 0.0 if self.since < self.started_at else None

    def _window(
        self, conn: psycopg.Connection[Any], until: datetime, limit: int
    ) -> leases.RescueWindow:
        config = self.host.config
        return leases.rescue_window(
            conn,
            self.host.supervisor_id,
            self.started_at,
            self.since,
            until,
            limit=limit,
            max_attempts=config.max_attempts_overrides(),
            external_kinds=config.external_kinds(),
            history=config.history.enabled,
        )


class Rescuer(SlicedService[RescueRun]):
    """Starts a rescue run once per interval across the fleet, then moves one slice per turn."""

    name = "rescuer"

    def __init__(self, host: Host, interval: float, *, first_in: float = 0.0) -> None:
        super().__init__(host, interval, first_in=first_in)
        self.width = WindowWidth()

    def start(self) -> RescueRun | None:
        host = self.host
        started_at = host.db.run(
            "rescuer",
            lambda conn: maintenance.claim_turn(
                conn, locks.RESCUE, "rescue", host.supervisor_id, self.interval
            ),
        )
        if started_at is None:
            return None
        start = host.db.run("rescuer", leases.rescue_start)
        if start is None:
            return None  # retried at the next interval, from the same mark
        mark, earliest = start
        # Once more over the last interval's windows: a lease whose row someone held (a cancel
        # request's transaction, say) was skipped there, and is looked at again.
        since = mark - timedelta(seconds=self.interval) if mark is not None else earliest
        host.counters.rescuer_runs += 1
        log.debug("rescuer: running (supervisor %s)", host.supervisor_id)
        return RescueRun(host, started_at, since if since is not None else started_at, self.width)

    def finish(self, run: RescueRun) -> None:
        if run.superseded:
            log.info(
                "rescuer: another supervisor started the next run; this one stops after "
                "returning %d jobs",
                run.requeued + run.discarded,
            )
        if not run.requeued and not run.discarded:
            return
        log.warning(
            "rescuer: %d jobs with expired leases returned to their queues, %d "
            "discarded (no attempts left)%s: %s",
            run.requeued,
            run.discarded,
            f" in {time.monotonic() - run.clock:.1f}s" if run.slices > 1 else "",
            ", ".join(f"{m.kind} job {m.id} ({m.queue})" for m in run.named),
        )
