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
# How long one window should take (a slice of the loop's turn), and the width of expiry time the
# first one covers; the width then follows what each window cost, at most doubling per window
# (an empty stretch after a quiet weekend is crossed in a few dozen windows).
WINDOW_SECONDS = 0.01
FIRST_WIDTH = timedelta(seconds=1)
MIN_WIDTH = timedelta(milliseconds=10)
MAX_WIDTH = timedelta(days=30)


class WindowWidth:
    """How much expiry time the next window covers, scaled to last about WINDOW_SECONDS."""

    def __init__(self) -> None:
        self.width = FIRST_WIDTH

    def learn(self, took: float) -> None:
        factor = min(2.0, max(0.25, WINDOW_SECONDS / max(took, 1e-4)))
        self.width = min(MAX_WIDTH, max(MIN_WIDTH, self.width * factor))

    def failed(self) -> None:
        """A window that failed (most likely the statement timeout) is tried again narrower."""
        self.width = max(MIN_WIDTH, self.width / 4)


class RescueRun:
    """One interval's rescue, claimed at ``started_at``; ``step`` moves one slice."""

    def __init__(self, host: Host, started_at: datetime, since: datetime) -> None:
        self.host = host
        self.started_at = started_at
        # The windows run from ``since`` to the run's start (the database's clock).
        self.since = since
        self.width = WindowWidth()
        self.size = SliceSize(host.config.rescue.batch)
        self.requeued = 0
        self.discarded = 0
        self.named: list[maintenance.Moved] = []
        self.superseded = False
        self.clock = time.monotonic()
        self.slices = 0

    def step(self) -> float | None:
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
        return RescueRun(host, started_at, since if since is not None else started_at)

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
