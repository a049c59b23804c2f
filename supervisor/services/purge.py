"""The nightly purge, in slices (``slices.py``): one bounded step per turn of the master's loop.

At ``purge.at`` (local time) one supervisor of those sharing the database deletes dead letters
older than ``purge.discarded_after``, keeps the coming days' history partitions made, drops the
partitions past ``history.keep`` and trims the default partition. Ten million dead letters take
minutes to delete; done in one go they would hold the loop that renews leases, reaps children
and answers signals and /livez. So the purge is a run that advances one step per turn: a slice
sized to take about ``SLICE_SECONDS``, then back to the loop. A partition the completions keep
busy (DROP needs an exclusive lock on the history table) is tried again later, not waited for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from datetime import time as dt_time
from typing import Any, Literal

import psycopg

from supervisor.queue import costs, locks, maintenance, progress
from supervisor.services.base import Host
from supervisor.services.slices import STEP_RETRY_AFTER, SlicedService, SliceSize

log = logging.getLogger("pgq.master")

# A busy partition is tried again after this long, this many times, then left for tomorrow.
DROP_RETRY_AFTER = 30.0
DROP_TRIES = 20
# How long the log of singleton maintenance runs (pgq.maintenance_runs) is kept.
MAINTENANCE_LOG_KEEP = timedelta(days=7)


class PurgeRun:
    """One night's purge, as a sequence of steps; ``step`` does one and says when to do the
    next (None: finished)."""

    def __init__(self, host: Host, now: datetime) -> None:
        """``now`` is the run's start on the database's clock: the cutoffs are counted from it,
        so a host whose clock is off deletes nothing younger than ``discarded_after``."""
        config = host.config
        self.host = host
        self.now = now
        self.dead_before = now - timedelta(seconds=config.purge.discarded_after)
        self.history_before = now - timedelta(seconds=config.history.keep)
        self.size = SliceSize(config.purge.batch)
        self.purged = 0
        self.dropped = 0
        self.drop_tries = 0
        self.started = time.monotonic()
        self.stages: list[Callable[[], float | None]] = [
            self._dead_letters,
            self._results,
            self._costs,
            self._progress,
            self._batches,
            self._runs_log,
        ]
        if config.history.enabled:
            self.stages += [self._partitions_ahead, self._old_partitions, self._history_default]

    def step(self) -> float | None:
        """Run the current stage once; returns the pause before the next step, None when done.
        One stage call per turn, even when a stage ends: the next may wait on a lock."""
        if not self.stages:
            return None
        pause = self.stages[0]()
        if pause is not None:
            return pause
        self.stages.pop(0)
        return 0.0 if self.stages else None

    # -- stages: each returns a pause to come back after, or None when it has finished --------

    def _dead_letters(self) -> float | None:
        return self._sliced(
            "purge of dead letters",
            lambda conn, limit: maintenance.purge_discarded_slice(
                conn, self.dead_before, limit=limit
            ),
            counted=True,
        )

    def _results(self) -> float | None:
        # Kept results (pgq.job_results) go after history.keep, history or not.
        return self._sliced(
            "purge of kept results",
            lambda conn, limit: maintenance.purge_results_slice(
                conn, self.history_before, limit=limit
            ),
        )

    def _costs(self) -> float | None:
        # What attempts cost (pgq.attempt_costs) is kept as long as the history.
        return self._sliced(
            "purge of attempt costs",
            lambda conn, limit: costs.purge_slice(conn, self.history_before, limit=limit),
        )

    def _progress(self) -> float | None:
        # What handlers said of their progress stays as long as the history.
        return self._sliced(
            "purge of job progress",
            lambda conn, limit: progress.purge_slice(conn, self.history_before, limit=limit),
        )

    def _batches(self) -> float | None:
        # Finished batches (their counters go with them) after purge.discarded_after.
        return self._sliced(
            "purge of finished batches",
            lambda conn, limit: maintenance.purge_batches_slice(
                conn, self.dead_before, limit=limit
            ),
        )

    def _runs_log(self) -> float | None:
        # A day's rows of pgq.maintenance_runs (a few per minute across the fleet): one DELETE.
        before = self.now - MAINTENANCE_LOG_KEEP
        self.host.db.run(
            "trim of the maintenance log",
            lambda conn: maintenance.forget_maintenance_runs(conn, before),
        )
        return None

    def _partitions_ahead(self) -> float | None:
        # Not worth waiting for: they were made days ahead, and rows of a day without one land
        # in the default partition until the next try moves them.
        self.host.db.run("history partitions", maintenance.ensure_history_partitions)
        return None

    def _old_partitions(self) -> float | None:
        dropped = self.host.db.run("drop of a history partition", self._drop_one)
        if dropped is None:
            return STEP_RETRY_AFTER
        if dropped > 0:
            self.dropped += dropped
            return 0.0
        if dropped == 0:
            return None
        self.drop_tries += 1
        if self.drop_tries >= DROP_TRIES:
            log.warning(
                "purge: pgq.job_history stayed busy (%d tries over %.0fs); old partitions are "
                "left for the next purge",
                self.drop_tries,
                self.drop_tries * DROP_RETRY_AFTER,
            )
            return None
        log.info(
            "purge: pgq.job_history is busy; dropping its old partitions again in %.0fs",
            DROP_RETRY_AFTER,
        )
        return DROP_RETRY_AFTER

    def _drop_one(self, conn: psycopg.Connection[Any]) -> int:
        """1 dropped, 0 none left, -1 the table was busy (its lock timeout ran out)."""
        try:
            return maintenance.drop_history_partition(conn, self.history_before)
        except psycopg.errors.LockNotAvailable:
            return -1

    def _history_default(self) -> float | None:
        return self._sliced(
            "purge of old history",
            lambda conn, limit: maintenance.purge_history_default_slice(
                conn, self.history_before, limit=limit
            ),
        )

    def _sliced(
        self,
        what: str,
        delete: Callable[[psycopg.Connection[Any], int], int],
        *,
        counted: bool = False,
    ) -> float | None:
        """One slice of a stage that deletes rows: again at the next turn while slices come
        back full, done when one comes back short."""
        deleted = self.size.take(
            lambda limit: self.host.db.run(what, lambda conn: delete(conn, limit)), rows=int
        )
        if deleted is None:
            return STEP_RETRY_AFTER
        if counted:  # dead letters, shown as pgq_purged_jobs_total as they go
            self.purged += deleted
            self.host.counters.purged += deleted
        return 0.0 if self.size.full(deleted) else None


class Purger(SlicedService[PurgeRun]):
    """Starts a purge run once a day at purge.at, then advances it one step per turn."""

    name = "purge"

    def __init__(self, host: Host) -> None:
        super().__init__(host, 86400.0)
        self.next_due = self.next_run(time.monotonic())  # at purge.at, not at start

    def next_start(self, now: float) -> float:
        wall = time.time()
        return now + next_daily(self.host.config.purge.at, wall) - wall

    def start(self) -> PurgeRun | None:
        ours = self.host.db.run("purge", self._our_turn)
        if ours is None:
            return None  # the database said nothing: the failure is logged, tried tomorrow
        if not ours:
            log.info("purge: another supervisor runs today's purge")
            return None
        return PurgeRun(self.host, ours)

    def finish(self, run: PurgeRun) -> None:
        log.info(
            "purge: deleted %d dead letters older than %s and dropped %d history partitions "
            "in %.1fs",
            run.purged,
            timedelta(seconds=self.host.config.purge.discarded_after),
            run.dropped,
            time.monotonic() - run.started,
        )

    def _our_turn(self, conn: psycopg.Connection[Any]) -> datetime | Literal[False]:
        """Once a day across every supervisor on the database: the first to record the run
        gets its start (the database's clock)."""
        claimed = maintenance.claim_turn(
            conn, locks.PURGE, "purge", self.host.supervisor_id, 3600.0
        )
        return claimed if claimed is not None else False


def next_daily(at: dt_time, now: float, zone: tzinfo | None = None) -> float:
    """The next moment after ``now`` (a timestamp) when the wall clock of ``zone`` (the host's
    own when None) reads ``at``. Each day's moment is that day's own: across a daylight-saving
    change it is not "24 hours after yesterday's" (an hour off), and an ``at`` inside the hour
    skipped in spring falls after the gap, like a cron tick."""
    day = datetime.fromtimestamp(now, zone).date()
    for days in range(3):
        wall = datetime.combine(day + timedelta(days=days), at)
        moment = _moment(wall, zone)
        if moment > now:
            return moment
    raise AssertionError("a wall-clock time recurs every day")


def _moment(wall: datetime, zone: tzinfo | None) -> float:
    # A naive datetime's timestamp() reads it with the host's own zone rules (mktime).
    moment = wall.replace(tzinfo=zone).timestamp() if zone else wall.timestamp()
    if _reading(moment, zone) == wall:
        return moment
    # Inside a gap: the first second whose reading is past ``wall`` (the end of the gap).
    lo, hi = moment - 3 * 3600, moment + 3 * 3600
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _reading(mid, zone) >= wall:
            hi = mid
        else:
            lo = mid
    return hi


def _reading(moment: float, zone: tzinfo | None) -> datetime:
    return datetime.fromtimestamp(moment, zone).replace(tzinfo=None)
